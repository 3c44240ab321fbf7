// Package sched is the machinery behind ormlock's schedules (ormlock.Cron,
// ormlock.Every): the cron parser's output as a
// wall-clock grid, and the search for the slot of a trigger with the
// daylight saving rules documented on ormlock.Schedule. Only the public
// face in package ormlock is a promise.
package sched

import (
	"fmt"
	"time"

	"github.com/ormlock/ormlock/internal/errs"
)

// Slotter is what package ormlock calls a Schedule.
type Slotter interface {
	Slot(t time.Time) time.Time
}

// Tolerance is ormlock.SlotTolerance: how early a trigger may fire and
// still count for the scheduled time it precedes.
const Tolerance = 5 * time.Second

// Every returns the schedule of period d, by the rules of
// docs/SCHEDULES.md (Every); errors wrap ormlock.ErrInvalidArgument and
// name verb.
func Every(verb string, d time.Duration, loc *time.Location) (Slotter, error) {
	const day = 24 * time.Hour
	switch {
	case d <= 0:
		return nil, fmt.Errorf("%w: %s: period must be positive, got %v", errs.ErrInvalidArgument, verb, d)
	case d < time.Second:
		return nil, fmt.Errorf("%w: %s: period %v is shorter than a second (the finest slot ormlock keeps)", errs.ErrInvalidArgument, verb, d)
	case d%time.Second != 0:
		return nil, fmt.Errorf("%w: %s: period %v is not a whole number of seconds", errs.ErrInvalidArgument, verb, d)
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
	tol := Tolerance
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
