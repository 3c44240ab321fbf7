package sched

import (
	"fmt"
	mbits "math/bits"
	"strings"
	"time"

	"github.com/ormlock/ormlock/internal/errs"
	"github.com/robfig/cron/v3"
)

var (
	standardParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	secondsParser  = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
)

// Cron parses expr with robfig/cron v3's standard parser, or with the
// optional seconds field when seconds is set; errors wrap ormlock.ErrInvalidArgument and
// name verb. The rules are in docs/SCHEDULES.md (Cron).
func Cron(verb, expr string, loc *time.Location, seconds bool) (s Slotter, err error) {
	p := standardParser
	if seconds {
		p = secondsParser
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s(%q): %s", errs.ErrInvalidArgument, verb, expr, fmt.Sprintf(format, args...))
	}
	// robfig/cron slices the zone up to the first space: a prefix alone
	// would panic there.
	if hasZonePrefix(expr) && !strings.Contains(expr, " ") {
		return nil, bad("time zone prefix without an expression")
	}
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, bad("%v", r)
		}
	}()
	parsed, err := p.Parse(expr)
	if err != nil {
		return nil, bad("%v", err)
	}
	if loc == nil {
		loc = time.UTC
	}
	switch ps := parsed.(type) {
	case cron.ConstantDelaySchedule:
		return Every(verb, ps.Delay, nil)
	case *cron.SpecSchedule:
		if hasZonePrefix(expr) {
			loc = ps.Location
		}
		c := &cronSched{
			expr: expr, loc: loc,
			sec: ps.Second, min: ps.Minute, hour: ps.Hour, dom: ps.Dom, mon: ps.Month, dw: ps.Dow,
			or: ps.Dom&starBit == 0 && ps.Dow&starBit == 0,
		}
		if _, ok := c.atOrAfter(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)); !ok {
			return nil, bad("never fires (no chosen month has the chosen day)")
		}
		return c, nil
	default:
		return nil, bad("unexpected schedule type %T", parsed)
	}
}

// hasZonePrefix is robfig/cron's own test for a time zone prefix.
func hasZonePrefix(expr string) bool {
	return strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=")
}

// starBit is the bit robfig/cron's SpecSchedule sets in a field written as *
// or ? (without a step greater than 1).
const starBit = 1 << 63

type bits uint64

func (b bits) has(i int) bool { return b&(1<<uint(i)) != 0 }

// cronSched is a robfig/cron SpecSchedule as a wall-clock grid in loc.
type cronSched struct {
	expr                         string
	sec, min, hour, dom, mon, dw uint64
	or                           bool // both day fields restrict: either matches
	loc                          *time.Location
}

func (c *cronSched) Slot(t time.Time) time.Time { return slotOf(c, c.loc, t) }

// String returns the expression and the location, e.g. "0 0 * * * in UTC".
func (c *cronSched) String() string { return c.expr + " in " + c.loc.String() }

func (c *cronSched) dayMatches(w time.Time) bool {
	d, wd := bits(c.dom).has(w.Day()), bits(c.dw).has(int(w.Weekday()))
	if c.or {
		return d || wd
	}
	return d && wd
}

// cronSearch bounds the search for the next or previous match; any
// satisfiable expression matches within 28 years (the Gregorian weekday
// cycle, leap days included, outside century years).
const cronSearch = 30

// atOrBefore returns the latest time of the grid at or before w (a
// wall-clock time as a UTC time.Time).
func (c *cronSched) atOrBefore(w time.Time) (time.Time, bool) {
	w = w.Truncate(time.Second)
	stop := w.AddDate(-cronSearch, 0, 0)
	for w.After(stop) {
		y, m, day, hour, minute := floors(w)
		switch {
		case !bits(c.mon).has(int(m)):
			w = time.Date(y, m, 1, 0, 0, 0, 0, time.UTC).Add(-time.Second)
		case !c.dayMatches(w):
			w = day.Add(-time.Second)
		case !bits(c.hour).has(w.Hour()):
			if h, ok := prevBit(c.hour, w.Hour()); ok {
				w = day.Add(time.Duration(h)*time.Hour + time.Hour - time.Second)
			} else {
				w = day.Add(-time.Second)
			}
		case !bits(c.min).has(w.Minute()):
			if mi, ok := prevBit(c.min, w.Minute()); ok {
				w = hour.Add(time.Duration(mi)*time.Minute + time.Minute - time.Second)
			} else {
				w = hour.Add(-time.Second)
			}
		case !bits(c.sec).has(w.Second()):
			if sec, ok := prevBit(c.sec, w.Second()); ok {
				w = minute.Add(time.Duration(sec) * time.Second)
			} else {
				w = minute.Add(-time.Second)
			}
		default:
			return w, true
		}
	}
	return time.Time{}, false
}

// floors returns w's year and month, and the starts of its day, hour and
// minute.
func floors(w time.Time) (y int, m time.Month, day, hour, minute time.Time) {
	y, m, d := w.Date()
	return y, m, time.Date(y, m, d, 0, 0, 0, 0, time.UTC), w.Truncate(time.Hour), w.Truncate(time.Minute)
}

func (c *cronSched) after(w time.Time) (time.Time, bool) {
	return c.atOrAfter(w.Truncate(time.Second).Add(time.Second))
}

func (c *cronSched) atOrAfter(w time.Time) (time.Time, bool) {
	stop := w.AddDate(cronSearch, 0, 0)
	for w.Before(stop) {
		y, m, day, hour, minute := floors(w)
		switch {
		case !bits(c.mon).has(int(m)):
			w = time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC)
		case !c.dayMatches(w):
			w = day.AddDate(0, 0, 1)
		case !bits(c.hour).has(w.Hour()):
			if h, ok := nextBit(c.hour, w.Hour(), 23); ok {
				w = day.Add(time.Duration(h) * time.Hour)
			} else {
				w = day.AddDate(0, 0, 1)
			}
		case !bits(c.min).has(w.Minute()):
			if mi, ok := nextBit(c.min, w.Minute(), 59); ok {
				w = hour.Add(time.Duration(mi) * time.Minute)
			} else {
				w = hour.Add(time.Hour)
			}
		case !bits(c.sec).has(w.Second()):
			if sec, ok := nextBit(c.sec, w.Second(), 59); ok {
				w = minute.Add(time.Duration(sec) * time.Second)
			} else {
				w = minute.Add(time.Minute)
			}
		default:
			return w, true
		}
	}
	return time.Time{}, false
}

// nextBit returns the smallest value above v and at most max whose bit is
// set in b.
func nextBit(b uint64, v, max int) (int, bool) {
	rest := b &^ (1<<uint(v+1) - 1) & (1<<uint(max+1) - 1)
	if rest == 0 {
		return 0, false
	}
	return mbits.TrailingZeros64(rest), true
}

// prevBit returns the largest value below v whose bit is set in b.
func prevBit(b uint64, v int) (int, bool) {
	rest := b & (1<<uint(v) - 1)
	if rest == 0 {
		return 0, false
	}
	return 63 - mbits.LeadingZeros64(rest), true
}
