package ormlock

import (
	"fmt"
	"time"
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
// Cron expressions are parsed by robfig/cron v3's own parser (cron.go), the
// one gocron v2 and robfig/cron run, so that ormlock's slots are the
// schedulers' firings: a parser of ormlock's own had drifted from it once,
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
const SlotTolerance = 5 * time.Second

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
	const day = 24 * time.Hour
	switch {
	case d <= 0:
		return nil, fmt.Errorf("%w: ormlock.Every: period must be positive, got %v", ErrInvalidArgument, d)
	case d < time.Second:
		return nil, fmt.Errorf("%w: ormlock.Every: period %v is shorter than a second (the finest slot ormlock keeps)", ErrInvalidArgument, d)
	case d%time.Second != 0:
		return nil, fmt.Errorf("%w: ormlock.Every: period %v is not a whole number of seconds", ErrInvalidArgument, d)
	}
	if loc == nil {
		loc = time.UTC
	}
	if (d < day && day%d != 0) || (d > day && d%day != 0) {
		// not aligned to midnights: elapsed time since the Unix epoch, a
		// grid of the fixed zone UTC
		loc = time.UTC
	}
	return &every{secs: int64(d / time.Second), d: d, loc: loc}, nil
}

// every is the wall-clock grid of multiples of secs since 1970-01-01 00:00
// local time; when secs divides a day or is a number of days, that is
// aligned to every local midnight (or every n-th), and otherwise loc is UTC.
type every struct {
	secs int64
	d    time.Duration
	loc  *time.Location
}

func (e *every) Slot(t time.Time) time.Time { return slotOf(e, e.loc, t) }

// String returns e.g. "every 24h0m0s in Europe/Berlin".
func (e *every) String() string { return "every " + e.d.String() + " in " + e.loc.String() }

func (e *every) atOrBefore(w time.Time) (time.Time, bool) {
	return time.Unix(floorDiv(w.Unix(), e.secs)*e.secs, 0).UTC(), true
}

func (e *every) after(w time.Time) (time.Time, bool) {
	return time.Unix((floorDiv(w.Unix(), e.secs)+1)*e.secs, 0).UTC(), true
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// grid is a set of wall-clock times, each represented as a time.Time in UTC
// whose fields are the local wall-clock fields.
type grid interface {
	// atOrBefore returns the latest time of the set at or before w.
	atOrBefore(w time.Time) (time.Time, bool)
	// after returns the earliest time of the set after w.
	after(w time.Time) (time.Time, bool)
}

// slotOf implements Slot for a wall-clock grid in loc (rules: see Schedule).
func slotOf(g grid, loc *time.Location, t time.Time) time.Time {
	w := wallOf(t, loc)
	// When the clocks went back shortly before t, the wall clock read later
	// times than it does at t: every grid time up to that reading has its
	// first occurrence before t, so start from there.
	if start, _ := t.In(loc).ZoneBounds(); !start.IsZero() && !start.After(t) {
		if before := wallOf(start.Add(-time.Nanosecond), loc); before.After(w) {
			w = before
		}
	}
	c, ok := g.atOrBefore(w)
	if !ok {
		return time.Time{}
	}
	// c <= wall(t), so its first occurrence is at or before t. When the
	// clocks went back, later wall times may have first occurrences at or
	// before t too: move forward to the last of them.
	s1 := firstInstant(c, loc)
	var s2 time.Time
	for range maxForward {
		n, ok := g.after(c)
		if !ok {
			return s1.UTC()
		}
		s2 = firstInstant(n, loc)
		if s2.After(t) {
			break
		}
		c, s1 = n, s2
	}
	tol := SlotTolerance
	if half := s2.Sub(s1) / 2; half < tol {
		tol = half
	}
	if s2.Sub(t) <= tol {
		return s2.UTC()
	}
	return s1.UTC()
}

// maxForward bounds the walk over repeated wall times: a per-second grid
// through the largest backward clock change on record (a day) fits.
const maxForward = 2 * 86400

// wallOf returns the wall-clock time of t in loc, as a UTC time.Time.
func wallOf(t time.Time, loc *time.Location) time.Time {
	lt := t.In(loc)
	return time.Date(lt.Year(), lt.Month(), lt.Day(), lt.Hour(), lt.Minute(), lt.Second(), lt.Nanosecond(), time.UTC)
}

// firstInstant returns the first instant at which the wall clock of loc
// reads w (a wall-clock time as a UTC time.Time): its first occurrence when
// the clocks go back over it, and the instant the clocks jump when they skip
// it.
func firstInstant(w time.Time, loc *time.Location) time.Time {
	u := w.Unix()
	ns := int64(w.Nanosecond())
	// UTC offsets lie within -12h..+14h, so every occurrence of w lies in
	// [u-15h, u+15h]. Walk the zone periods from there in order.
	x := time.Unix(u-15*3600, 0).In(loc)
	for range 16 {
		_, off := x.Zone()
		start, end := x.ZoneBounds()
		if start.Before(x) || start.IsZero() {
			start = x
		}
		// the wall-clock range of this period is [start+off, end+off)
		if wallSecs(start, off) > u || (wallSecs(start, off) == u && start.Nanosecond() > int(ns)) {
			return start // w lies in the gap before this period
		}
		cand := time.Unix(u-int64(off), ns)
		if end.IsZero() || cand.Before(end) {
			return cand.In(loc)
		}
		x = end
	}
	// unreachable with real zone data; fall back to Go's own choice
	return time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), loc)
}

func wallSecs(t time.Time, off int) int64 { return t.Unix() + int64(off) }
