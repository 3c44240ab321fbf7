package ormlock

import (
	"fmt"
	"strconv"
	"strings"
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

// Every returns the schedule of period d aligned to midnight in loc (nil
// means UTC):
//
//   - d a divisor of 24h (1h, 15m, 6h, 24h, ...): the local times 00:00,
//     00:00+d, ... of each day. Every(24*time.Hour, berlin) is local midnight,
//     Every(6*time.Hour, berlin) is 00:00, 06:00, 12:00 and 18:00 local time,
//     also on the days the clocks change (see [Schedule] for the rules).
//   - d a whole number of days (48h, 168h, ...): local midnight every d/24h
//     days, counting from 1970-01-01. For a chosen weekday use [Cron].
//
// d must be a whole number of seconds; other periods (7h, 36h, 0, negative)
// are rejected with an error wrapping [ErrInvalidArgument].
func Every(d time.Duration, loc *time.Location) (Schedule, error) {
	const day = 24 * time.Hour
	switch {
	case d <= 0:
		return nil, fmt.Errorf("%w: ormlock.Every: period must be positive, got %v", ErrInvalidArgument, d)
	case d%time.Second != 0:
		return nil, fmt.Errorf("%w: ormlock.Every: period %v is not a whole number of seconds", ErrInvalidArgument, d)
	case d < day && day%d != 0:
		return nil, fmt.Errorf("%w: ormlock.Every: period %v does not divide 24h, so its slots could not be aligned to midnight", ErrInvalidArgument, d)
	case d > day && d%day != 0:
		return nil, fmt.Errorf("%w: ormlock.Every: period %v is longer than a day but not a whole number of days", ErrInvalidArgument, d)
	}
	if loc == nil {
		loc = time.UTC
	}
	return &every{secs: int64(d / time.Second), d: d, loc: loc}, nil
}

// every is the wall-clock grid of multiples of secs since 1970-01-01 00:00
// local time; since secs divides a day or is a number of days, that is
// aligned to every local midnight (or every n-th).
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

// ---- cron ----

// Cron parses a standard five-field cron expression in loc (nil means UTC):
//
//	minute hour day-of-month month day-of-week
//
// Each field is * or a comma-separated list of values, ranges (a-b) and
// steps (*/n, a-b/n, a/n = a-max/n). Ranges: minute 0-59, hour 0-23,
// day-of-month 1-31, month 1-12 or JAN-DEC, day-of-week 0-7 or SUN-SAT (0 and
// 7 are Sunday); names are case-insensitive; ? is accepted for * in the day
// fields. As in Vixie cron, when both day fields are restricted (neither
// starts with *) a day matches if either does: "0 0 13 * 5" is the 13th and
// every Friday. The macros @yearly (@annually), @monthly, @weekly, @daily
// (@midnight) and @hourly are accepted.
//
// Slot(t) follows the rules of [Schedule]: the latest scheduled time at or
// before t, a trigger up to [SlotTolerance] early counting for the next one,
// repeated wall times counted once and skipped ones moved to the instant the
// clocks jump.
//
// Errors wrap [ErrInvalidArgument] and name the field at fault. Seconds
// fields, "TZ=" prefixes (pass loc instead), @every (use [Every]) and
// expressions that can never match ("0 0 30 2 *") are rejected.
func Cron(expr string, loc *time.Location) (Schedule, error) {
	c, err := parseCron(expr)
	if err != nil {
		return nil, err
	}
	if loc == nil {
		loc = time.UTC
	}
	c.loc = loc
	return c, nil
}

type bits uint64

func (b bits) has(i int) bool { return b&(1<<uint(i)) != 0 }

type cronSched struct {
	expr                    string
	min, hour, dom, mon, dw bits
	domStar, dowStar        bool
	loc                     *time.Location
}

func (c *cronSched) Slot(t time.Time) time.Time { return slotOf(c, c.loc, t) }

// String returns the expression and the location, e.g. "0 0 * * * in UTC".
func (c *cronSched) String() string { return c.expr + " in " + c.loc.String() }

func (c *cronSched) dayMatches(w time.Time) bool {
	d, wd := c.dom.has(w.Day()), c.dw.has(int(w.Weekday()))
	if c.domStar || c.dowStar {
		return d && wd
	}
	return d || wd
}

// cronSearch bounds the search for the next or previous match; any
// satisfiable expression matches within 28 years (the Gregorian weekday
// cycle, leap days included, outside century years).
const cronSearch = 30

func (c *cronSched) atOrBefore(w time.Time) (time.Time, bool) {
	w = w.Truncate(time.Minute)
	stop := w.AddDate(-cronSearch, 0, 0)
	for w.After(stop) {
		y, m, d := w.Date()
		switch {
		case !c.mon.has(int(m)):
			w = time.Date(y, m, 1, 0, 0, 0, 0, time.UTC).Add(-time.Minute)
		case !c.dayMatches(w):
			w = time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Add(-time.Minute)
		case !c.hour.has(w.Hour()):
			w = w.Truncate(time.Hour).Add(-time.Minute)
		case !c.min.has(w.Minute()):
			w = w.Add(-time.Minute)
		default:
			return w, true
		}
	}
	return time.Time{}, false
}

func (c *cronSched) after(w time.Time) (time.Time, bool) {
	return c.atOrAfter(w.Truncate(time.Minute).Add(time.Minute))
}

func (c *cronSched) atOrAfter(w time.Time) (time.Time, bool) {
	stop := w.AddDate(cronSearch, 0, 0)
	for w.Before(stop) {
		y, m, d := w.Date()
		switch {
		case !c.mon.has(int(m)):
			w = time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC)
		case !c.dayMatches(w):
			w = time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
		case !c.hour.has(w.Hour()):
			w = w.Truncate(time.Hour).Add(time.Hour)
		case !c.min.has(w.Minute()):
			w = w.Add(time.Minute)
		default:
			return w, true
		}
	}
	return time.Time{}, false
}

var cronMacros = map[string]string{
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
	"@monthly":  "0 0 1 * *",
	"@weekly":   "0 0 * * 0",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@hourly":   "0 * * * *",
}

type cronField struct {
	name     string
	min, max int
	names    []string // names[i] is the value min+i
}

var (
	monthNames = []string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}
	dowNames   = []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}
	cronFields = [5]cronField{
		{name: "minute", min: 0, max: 59},
		{name: "hour", min: 0, max: 23},
		{name: "day-of-month", min: 1, max: 31},
		{name: "month", min: 1, max: 12, names: monthNames},
		{name: "day-of-week", min: 0, max: 7, names: dowNames},
	}
)

func parseCron(expr string) (*cronSched, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: cron %q: %s", ErrInvalidArgument, expr, fmt.Sprintf(format, args...))
	}
	spec := strings.TrimSpace(expr)
	if spec == "" {
		return nil, bad("empty expression")
	}
	if strings.HasPrefix(spec, "@") {
		m, ok := cronMacros[strings.ToLower(spec)]
		if !ok {
			if strings.HasPrefix(strings.ToLower(spec), "@every") {
				return nil, bad("@every is not a cron schedule; use ormlock.Every")
			}
			return nil, bad("unknown macro (want @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly)")
		}
		spec = m
	}
	f := strings.Fields(spec)
	if len(f) > 0 && (strings.HasPrefix(f[0], "TZ=") || strings.HasPrefix(f[0], "CRON_TZ=")) {
		return nil, bad("time zone prefix %q: pass the location as Cron's loc argument instead", f[0])
	}
	if len(f) != 5 {
		return nil, bad("want 5 fields (minute hour day-of-month month day-of-week), got %d", len(f))
	}
	c := &cronSched{expr: expr}
	var sets [5]bits
	for i, spec := range f {
		b, err := parseField(cronFields[i], spec, i >= 2 && i != 3)
		if err != nil {
			return nil, bad("%s field %q: %v", cronFields[i].name, spec, err)
		}
		sets[i] = b
	}
	c.min, c.hour, c.dom, c.mon, c.dw = sets[0], sets[1], sets[2], sets[3], sets[4]
	if c.dw.has(7) {
		c.dw = c.dw&^(1<<7) | 1
	}
	c.domStar = strings.HasPrefix(f[2], "*") || strings.HasPrefix(f[2], "?")
	c.dowStar = strings.HasPrefix(f[4], "*") || strings.HasPrefix(f[4], "?")
	if c.dowStar && !c.domStar {
		// only the day of month restricts: it must exist in a chosen month
		possible := false
		for m := 1; m <= 12; m++ {
			if !c.mon.has(m) {
				continue
			}
			for d := 1; d <= daysIn(m); d++ {
				if c.dom.has(d) {
					possible = true
				}
			}
		}
		if !possible {
			return nil, bad("never matches: no chosen month has the chosen day of month")
		}
	}
	if _, ok := c.atOrAfter(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)); !ok {
		return nil, bad("never matches")
	}
	return c, nil
}

// daysIn is the most days month m can have (29 for February).
func daysIn(m int) int {
	switch m {
	case 2:
		return 29
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

func parseField(fd cronField, spec string, question bool) (bits, error) {
	var b bits
	for item := range strings.SplitSeq(spec, ",") {
		if item == "" {
			return 0, fmt.Errorf("empty list item")
		}
		rng, stepText, hasStep := strings.Cut(item, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepText)
			if err != nil || n <= 0 {
				return 0, fmt.Errorf("step %q is not a positive number", stepText)
			}
			step = n
		}
		var lo, hi int
		switch {
		case rng == "*" || (question && rng == "?"):
			lo, hi = fd.min, fd.max
			if fd.name == "day-of-week" {
				hi = 6 // 7 is Sunday again
			}
		default:
			a, z, isRange := strings.Cut(rng, "-")
			var err error
			if lo, err = fieldValue(fd, a); err != nil {
				return 0, err
			}
			hi = lo
			switch {
			case isRange:
				if hi, err = fieldValue(fd, z); err != nil {
					return 0, err
				}
				if hi < lo {
					return 0, fmt.Errorf("range %q runs backwards", rng)
				}
			case hasStep:
				hi = fd.max // a/n means a-max/n
			}
		}
		if step > fd.max-fd.min+1 && hasStep && lo != hi {
			return 0, fmt.Errorf("step %d is larger than the field's range %d-%d", step, fd.min, fd.max)
		}
		for v := lo; v <= hi; v += step {
			b |= 1 << uint(v)
		}
	}
	return b, nil
}

func fieldValue(fd cronField, s string) (int, error) {
	if s == "" {
		return 0, fmt.Errorf("missing value")
	}
	if n, err := strconv.Atoi(s); err == nil {
		if n < fd.min || n > fd.max {
			return 0, fmt.Errorf("value %d out of range %d-%d", n, fd.min, fd.max)
		}
		return n, nil
	}
	for i, name := range fd.names {
		if strings.EqualFold(s, name) {
			return fd.min + i, nil
		}
	}
	if fd.names != nil {
		return 0, fmt.Errorf("%q is neither a number in %d-%d nor a name (%s)", s, fd.min, fd.max, strings.Join(fd.names, ", "))
	}
	return 0, fmt.Errorf("%q is not a number in %d-%d", s, fd.min, fd.max)
}
