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
// that one. So a trigger 300 ms early or 5 s late (or an hour late, say after
// a restart) maps to the scheduled time it was for, and a job that polls
// ("is today's run done yet?") finds the current slot. (The scheduled time
// nearest to t would send a catch-up run more than half a period late to the
// next slot, whose own run would then find it done.)
//
// Daylight saving time: a wall-clock time that happens twice when the clocks
// go back is one slot, at its first occurrence (a daily job at 02:30 runs
// once on that day, and the repeated hour of an hourly schedule belongs to
// the slot of its first pass); a wall-clock time that does not exist when the
// clocks go forward is the instant the clocks jump (a daily job at 02:30 in
// Europe/Berlin has its slot at 03:00 CEST on the last Sunday of March), so
// no day is skipped. For a schedule of elapsed time that ignores daylight
// saving, use time.UTC (or any fixed zone).
//
// Cron expressions are parsed by robfig/cron v3's own parser (used in
// internal/sched), the one gocron v2 and robfig/cron run, so that
// ormlock's slots are the schedulers' firings: a parser of ormlock's own had drifted from it once,
// and robfig/cron v3 is a small module without dependencies, so the root
// go.mod stays lean. The search for the slot of a trigger and the daylight
// saving rules above are ormlock's own.
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
const SlotTolerance = sched.Tolerance

// Every returns the schedule of period d, which must be a whole number of
// seconds, one second or more; other periods (0, negative, 1500ms) are
// rejected with an error wrapping [ErrInvalidArgument]. Its times are:
//
//   - d a divisor of 24h (1s, 1h, 15m, 6h, 24h, ...): the local times 00:00,
//     00:00+d, ... of each day in loc (nil means UTC). Every(24*time.Hour,
//     berlin) is local midnight, Every(6*time.Hour, berlin) is 00:00, 06:00,
//     12:00 and 18:00 local time, also on the days the clocks change (see
//     [Schedule] for the rules).
//   - d a whole number of days (48h, 168h, ...): local midnight every d/24h
//     days, counting from 1970-01-01. For a chosen weekday use [Cron].
//   - any other period (7s, 90s, 7h, 36h, ...): the instants
//     1970-01-01T00:00:00Z + k*d, k any integer — elapsed time anchored to the
//     Unix epoch, whatever loc says, since such a period cannot line up with
//     local midnights.
//
// The fixed anchor is what makes an interval job (gocron.DurationJob,
// robfig/cron's "@every 90s") safe across replicas that started at
// different times: each one's firing maps to the window [k*d, (k+1)*d) it
// falls in (give or take [SlotTolerance]), so each window runs at most once.
// For such jobs pass a nil loc (or time.UTC): elapsed time knows no daylight
// saving, whereas a wall-clock grid in a zone with DST repeats an hour once
// a year, whose triggers then find their slots done.
func Every(d time.Duration, loc *time.Location) (Schedule, error) {
	return schedule(sched.Every(ErrInvalidArgument, "ormlock.Every", d, loc))
}

// schedule returns s as a Schedule, or the error (never a non-nil
// Schedule holding a nil pointer).
func schedule(s sched.Slotter, err error) (Schedule, error) {
	if err != nil {
		return nil, err
	}
	return s, nil
}
