package ormlock

import (
	"time"

	"github.com/ormlock/ormlock/internal/sched"
)

// Schedule maps the time a job was triggered to the slot it runs for: the
// scheduled time, never the wall clock of whichever instance fired first, so
// that instances whose clocks or timers differ by seconds pass RunOnce the
// same slot. [Every] and [Cron] build one; any type with this method will do.
//
// The schedules built here are sets of local wall-clock times in a stated
// location. Slot(t) is the latest scheduled time at or before t, except that
// a trigger at most [SlotTolerance] before the next scheduled time counts for
// that one. A wall-clock time repeated when the clocks go back is one slot,
// at its first occurrence; one that does not exist when they go forward is
// the instant the clocks jump. See docs/SCHEDULES.md (Slots).
//
// A run may therefore start before its scheduled time: up to SlotTolerance
// by the clock of the host that fired it, and by the database server's
// clock earlier still by as much as that host's clock runs ahead; RunOnce
// does not wait for the slot. fn names its work by the slot ([Slot], in
// the schedule's location), never by CURRENT_DATE or time.Now(), and waits
// for the server's clock itself when it must see everything written before
// its scheduled time. See
// docs/SCHEDULES.md (A run may start before its slot).
type Schedule interface {
	// Slot returns the scheduled time t belongs to, in UTC.
	Slot(t time.Time) time.Time
}

// SlotTolerance is how early a trigger may fire and still count for the
// scheduled time it precedes. Timers fire late rather than early, but a
// scheduler that slept until "midnight" wakes a little before it when the
// wall clock was stepped back meanwhile (NTP), and such a trigger must not
// count for the previous slot, or that day's run would be skipped. The
// tolerance is at most half the distance between the two scheduled times
// around the trigger.
//
// Such a trigger runs its slot at once: a midnight job may start at
// 23:59:55 by the triggering host's clock, and RunOnce does not hold it
// back. Take the run's date from its slot ([Slot]) in the schedule's
// location, not from the clock; see [Schedule] and
// docs/SCHEDULES.md (A run may start before its slot).
const SlotTolerance = sched.Tolerance

// Every returns the schedule of period d, a whole number of seconds, one
// second or more (other periods are an error wrapping [ErrInvalidArgument]).
// A divisor of 24h gives the local times 00:00, 00:00+d, ... of each day in
// loc (nil means UTC); a whole number of days, local midnight every d/24h
// days from 1970-01-01; any other period, the instants k*d after the Unix
// epoch, whatever loc says. That fixed anchor makes interval jobs agree
// across replicas: pass a nil loc for them. See docs/SCHEDULES.md (Every).
func Every(d time.Duration, loc *time.Location) (Schedule, error) {
	return schedule(sched.Every("ormlock.Every", d, loc))
}

// schedule returns s as a Schedule, or the error (never a non-nil
// Schedule holding a nil pointer).
func schedule(s sched.Slotter, err error) (Schedule, error) {
	if err != nil {
		return nil, err
	}
	return s, nil
}
