package sched

import (
	"fmt"
	"testing"
	"time"
	_ "time/tzdata"
)

// TestParseReadsStringBack: the String of every schedule Every and Cron
// make reads back (Parse) as a schedule with the same slots, as the
// controls table records it.
func TestParseReadsStringBack(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	var scheds []Slotter
	for _, d := range []time.Duration{time.Second, time.Minute, 90 * time.Second, time.Hour, 24 * time.Hour, 48 * time.Hour} {
		for _, loc := range []*time.Location{time.UTC, berlin} {
			s, err := Every("test", d, loc)
			if err != nil {
				t.Fatal(err)
			}
			scheds = append(scheds, s)
		}
	}
	for _, c := range []struct {
		expr    string
		seconds bool
	}{{"0 3 * * *", false}, {"*/15 * * * *", false}, {"CRON_TZ=Europe/Berlin 30 2 * * 1-5", false}, {"@daily", false}, {"*/10 * * * * *", true}} {
		for _, loc := range []*time.Location{time.UTC, berlin} {
			s, err := Cron("test", c.expr, loc, c.seconds)
			if err != nil {
				t.Fatal(err)
			}
			scheds = append(scheds, s)
		}
	}
	start := time.Date(2026, 3, 28, 0, 0, 0, 0, time.UTC) // across a DST change
	for _, s := range scheds {
		text := s.(fmt.Stringer).String()
		back, err := Parse(text)
		if err != nil {
			t.Errorf("Parse(%q): %v", text, err)
			continue
		}
		for i := range 200 {
			at := start.Add(time.Duration(i) * 17 * time.Minute)
			if got, want := back.Slot(at), s.Slot(at); !got.Equal(want) {
				t.Errorf("%q read back: slot of %s is %s, want %s", text, at, got, want)
				break
			}
		}
	}
	for _, bad := range []string{"", "every", "every 1h", "every x in UTC", "0 3 * * * in Mars/Base", "nonsense in UTC"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q): no error", bad)
		}
	}
}
