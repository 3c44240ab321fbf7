package webui

import (
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/sched"
)

func enumerable(s ormlock.Schedule) bool { return s != nil && sched.Enumerable(s) }

// maxEnumerate bounds the schedule slots one page lists, so that a
// per-second schedule over a year-old page of runs costs no more than a
// few milliseconds.
const maxEnumerate = 20000

// scheduleSlots returns the slots of s at or after from and before before,
// newest first, at most max of them (the newest). When more than
// maxEnumerate slots lie in between, the walk starts again closer to before,
// at the rate of the slots seen, and the older ones are left out.
func scheduleSlots(s ormlock.Schedule, from, before time.Time, max int) []time.Time {
	if max <= 0 || !from.Before(before) {
		return nil
	}
	walk := func(from time.Time) (ring []time.Time, complete bool) {
		n := 0
		for t := sched.Next(s, from.Add(-time.Nanosecond)); !t.IsZero() && t.Before(before); t = sched.Next(s, t) {
			if n == maxEnumerate {
				return ring, false
			}
			n++
			ring = append(ring, t)
			if len(ring) > 2*max {
				ring = append(ring[:0], ring[len(ring)-max:]...)
			}
		}
		return ring, true
	}
	ring, complete := walk(from)
	if !complete && len(ring) > 1 {
		// the slots' rate so far, over the whole walk of maxEnumerate
		// slots: start max*2 of those gaps before the end
		last := ring[len(ring)-1]
		gap := last.Sub(from) / maxEnumerate
		start := before.Add(-gap * time.Duration(2*max+2))
		if !start.After(last) {
			start = last
		}
		ring, _ = walk(start)
	}
	if len(ring) > max {
		ring = ring[len(ring)-max:]
	}
	out := make([]time.Time, len(ring))
	for i, t := range ring {
		out[len(ring)-1-i] = t
	}
	return out
}
