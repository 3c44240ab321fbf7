package webui

import (
	"testing"
	"time"

	"github.com/ormlock/ormlock"
)

// TestScheduleSlots: the newest slots before a time, newest first, bounded
// whatever the distance: a per-second schedule over a year is not walked
// second by second.
func TestScheduleSlots(t *testing.T) {
	hourly, err := ormlock.Every(time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	got := scheduleSlots(hourly, from, from.Add(5*time.Hour+time.Minute), 10)
	if len(got) != 6 || !got[0].Equal(from.Add(5*time.Hour)) || !got[5].Equal(from) {
		t.Errorf("hourly over 5h: %v", got)
	}
	if got := scheduleSlots(hourly, from, from.Add(5*time.Hour), 3); len(got) != 3 || !got[0].Equal(from.Add(4*time.Hour)) {
		t.Errorf("the newest 3 before 05:00: %v", got)
	}
	secondly, err := ormlock.Every(time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := from.Add(365 * 24 * time.Hour)
	start := time.Now()
	got = scheduleSlots(secondly, from, before, 20)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("a year of seconds took %v", took)
	}
	if len(got) != 20 || !got[0].Equal(before.Add(-time.Second)) || !got[19].Equal(before.Add(-20*time.Second)) {
		t.Errorf("the newest 20 seconds of a year: %v … (%d)", got[:min(len(got), 2)], len(got))
	}
	if got := scheduleSlots(hourly, before, from, 5); got != nil {
		t.Errorf("an empty range: %v", got)
	}
}
