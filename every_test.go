package ormlock_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
)

// A period that does not divide a day is anchored to the Unix epoch in
// elapsed time, whatever the zone: replicas started at different times, each
// firing every d from its own start (gocron.DurationJob, robfig/cron's
// @every), claim each window [k*d, (k+1)*d) at most once between them, and
// no window a replica fired in is left without a slot.
func TestEveryEpochAnchored(t *testing.T) {
	berlin := zone(t, "Europe/Berlin")
	checkSlots(t, every(t, 7*time.Second, berlin), []slotCase{
		{"1970-01-01T00:00:07Z", "1970-01-01T00:00:07Z"},
		{"1970-01-01T00:00:13Z", "1970-01-01T00:00:14Z"}, // within half the period before
		{"2025-10-26T00:59:57Z", "2025-10-26T00:59:54Z"}, // 1761440394 = 7 * 251634342
		{"2025-10-26T01:00:02Z", "2025-10-26T01:00:01Z"}, // across Berlin's clock change: elapsed time
	})
	checkSlots(t, every(t, 36*time.Hour, berlin), []slotCase{
		{"1970-01-02T12:00:00Z", "1970-01-02T12:00:00Z"},
		{"1970-01-03T23:59:00Z", "1970-01-02T12:00:00Z"},
	})
	r := rand.New(rand.NewPCG(7, 7))
	for _, d := range []time.Duration{time.Second, 7 * time.Second, 90 * time.Second, 7 * time.Hour} {
		s := every(t, d, nil)
		base := time.Date(2025, 10, 26, 0, 0, 0, 0, time.UTC)
		claimed := map[time.Time]int{} // slot -> replica
		for replica := range 3 {
			start := base.Add(time.Duration(r.Int64N(int64(d))))
			prev := time.Time{}
			for k := range 200 {
				// timers fire up to 300 ms late
				fire := start.Add(time.Duration(k)*d + time.Duration(r.Int64N(int64(300*time.Millisecond))))
				slot := s.Slot(fire)
				if slot.Sub(fire) > ormlock.SlotTolerance || fire.Sub(slot) >= d+ormlock.SlotTolerance {
					t.Fatalf("Every(%v): Slot(%v) = %v, not the window of the firing", d, fire, slot)
				}
				if got := slot.UnixNano() % int64(d); got != 0 {
					t.Fatalf("Every(%v): slot %v is not a multiple of the period since the epoch", d, slot)
				}
				if !prev.IsZero() && slot.Before(prev) {
					t.Fatalf("Every(%v): replica %d goes back to %v", d, replica, slot)
				}
				prev = slot
				claimed[slot] = replica
			}
		}
		// each window is one slot: the three replicas cover the same ones
		if n := len(claimed); n > 202 {
			t.Fatalf("Every(%v): %d slots for 200 firings of each replica", d, n)
		}
	}
}
