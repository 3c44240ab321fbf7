package ormlock_test

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	robfig "github.com/robfig/cron/v3"

	"github.com/ormlock/ormlock"
)

// The parity test: ormlock.Cron, five fields and six (with seconds), against the parser and
// firing times of robfig/cron v3 itself, the ones gocron v2 and robfig/cron
// run. For every expression of the corpus, in every zone given, over two
// years:
//
//   - every robfig/cron firing f maps to itself (Slot(f) == f), except a
//     second firing of a wall time repeated when the clocks go back, which
//     maps to its first occurrence — itself a firing (one run per wall time);
//   - every slot is a robfig/cron firing, except the instant the clocks jump
//     forward over a scheduled wall time that does not exist that day
//     (robfig/cron skips it; ormlock runs it at the jump).

var parityZones = []string{"UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Kolkata"}

// parityHand is the hand-picked part of the corpus: the dialect's edge
// cases. Dense ones run in two zones only, to keep the test fast.
var parityHand = []string{
	"0 0 */2 * 1", "0 0 */2 * *", "0 0 * * 1", "0 0 13 * 5", "0 0 13 * FRI", "0 0 1,15 * 3",
	"0 0 */1 * 1", "0 0 ? * MON", "0 0 1 * ?", "0 0 1-7 * 1", "0 0 */3 * 1-5", "0 0 2/3 * *",
	"0 0 * * */2", "0 0 */5 * */3", "0 0 1-31/2 * 0", "0 0 L-ish * *", "30 2 * * *", "0 2 * * *",
	"30 1 * * *", "0 1 * * *", "15 3 * * *", "0 */2 * * *", "0 * * * *",
	"30 * * * *", "45 1,2,3 * * *", "0 0 * * *", "59 23 * * *", "0 12 * * MON-FRI", "15,45 3 * * *",
	"0 9-17/2 * * 1-5", "0 0 29 2 *", "0 0 29 2 1", "0 0 31 * *",
	"0 0 30 * *", "0 0 1 jan,Jul *", "0 0 1 JAN-MAR/2 *", "0 0 * 2 *", "0 0 L * *",
	"0 0 * * 7", "0 0 * * sun", "0 0 * * SUN,SAT", "0 22 * * 0", "0 0 1 1 *",
	"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly",
	"0 0 1 * *", "0 0 15 * 1/2", "0 0 */10 */2 *", "23 0-20/2 * * *", "0 3-4 * * *",
	"30 0-3 * * *", "0,30 1-3 * * *", "0 1-2 * * 0", "0 0 8-14 * 2",
	"CRON_TZ=America/New_York 0 0 * * *", "TZ=Europe/London 30 1 * * *",
	"CRON_TZ=Australia/Lord_Howe */30 1-3 * * *", "CRON_TZ=UTC 0 0 */2 * 1",
}

var parityDense = []string{"*/10 * * * *", "* 1-2 * * *", "*/15 * * * *", "0,30 * * * *", "5/20 * * * *"}

// paritySeconds is the seconds dialect (six fields; five fields mean
// second 0 there, as in the standard dialect).
var paritySeconds = []string{
	"0 0 0 * * *", "30 0 0 */2 * 1", "*/20 30 1 * * *", "15 */30 * * * *", "0 0 */6 * * *",
	"0,30 0 2 * * *", "59 59 23 * * *", "0 30 2 * * *", "10 0 * * * *", "@daily", "0 0 * * *",
	"1-3 0 0 1 * *", "*/15 0 1 * * 0",
}

func TestCronParity(t *testing.T) {
	if testing.Short() {
		t.Skip("long: two years of firings per expression")
	}
	corpus := map[string][]string{} // expression -> zones
	for _, e := range parityHand {
		corpus[e] = parityZones
	}
	for _, e := range parityDense {
		corpus[e] = []string{"America/New_York", "Australia/Lord_Howe"}
	}
	gen := generatedCron(rand.New(rand.NewPCG(13, 2026)), 260)
	for i, e := range gen {
		corpus[e] = []string{parityZones[i%len(parityZones)], parityZones[(i+2)%len(parityZones)]}
	}
	std := robfig.NewParser(robfig.Minute | robfig.Hour | robfig.Dom | robfig.Month | robfig.Dow | robfig.Descriptor)
	sec := robfig.NewParser(robfig.SecondOptional | robfig.Minute | robfig.Hour | robfig.Dom | robfig.Month | robfig.Dow | robfig.Descriptor)
	if n := len(corpus) + len(paritySeconds); n < 200 {
		t.Fatalf("corpus has %d expressions, want at least 200", n)
	}
	var checked atomic.Int32
	var accepted sync.Map // expressions both parsers accept
	// two groups of parallel subtests, one per core
	t.Run("group", func(t *testing.T) {
		exprs := make([]string, 0, len(corpus))
		for e := range corpus {
			exprs = append(exprs, e)
		}
		sort.Strings(exprs)
		for g := range 2 {
			t.Run(fmt.Sprint(g), func(t *testing.T) {
				t.Parallel()
				for i, expr := range exprs {
					if i%2 != g {
						continue
					}
					for _, z := range corpus[expr] {
						if checkParity(t, expr, z, std, ormlock.Cron) {
							checked.Add(1)
							accepted.Store(expr, true)
						}
					}
				}
				if g == 0 {
					for _, expr := range paritySeconds {
						for _, z := range []string{"America/New_York", "Australia/Lord_Howe"} {
							if checkParity(t, expr, z, sec, ormlock.Cron) {
								checked.Add(1)
								accepted.Store("seconds:"+expr, true)
							}
						}
					}
				}
			})
		}
	})
	n := 0
	accepted.Range(func(any, any) bool { n++; return true })
	t.Logf("%d expressions, %d accepted by both (%d expression-zone pairs), checked over two years", len(corpus)+len(paritySeconds), n, checked.Load())
	if n < 200 {
		t.Errorf("only %d valid expressions in the corpus, want at least 200", n)
	}
}

// checkParity compares expr in zone z; it reports whether both accepted it.
func checkParity(t *testing.T, expr, z string, p robfig.Parser, parse func(string, *time.Location) (ormlock.Schedule, error)) bool {
	t.Helper()
	loc := zone(t, z)
	rexpr := expr
	if !strings.HasPrefix(expr, "TZ=") && !strings.HasPrefix(expr, "CRON_TZ=") {
		rexpr = "CRON_TZ=" + z + " " + expr
	}
	rs, rerr := p.Parse(rexpr)
	os, oerr := parse(expr, loc)
	if rerr != nil || oerr != nil {
		if (rerr == nil) != (oerr == nil) {
			// the one deviation: an expression that never fires
			if rerr == nil && rs.Next(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() && strings.Contains(oerr.Error(), "never fires") {
				return false
			}
			t.Errorf("%q: robfig/cron says %v, ormlock says %v", expr, rerr, oerr)
		}
		return false
	}
	if rloc := rs.(*robfig.SpecSchedule).Location; rloc.String() != fmt.Sprint(os)[strings.LastIndex(fmt.Sprint(os), " in ")+4:] {
		t.Errorf("%q in %s: robfig/cron's zone %v, ormlock's schedule %v", expr, z, rloc, os)
	}
	sloc := rs.(*robfig.SpecSchedule).Location // the schedule's zone (a prefix overrides z)
	halfHour := halfHourZone(sloc)
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).Add(-time.Second)
	end := start.AddDate(2, 0, 0)
	fired := map[time.Time]bool{}
	var firings []time.Time
	// changedSince reports whether the clocks changed after the last firing
	// before t: robfig/cron's search from there crossed the change.
	changedSince := func(t time.Time) bool {
		zs, _ := t.In(sloc).ZoneBounds()
		i := sort.Search(len(firings), func(i int) bool { return !firings[i].Before(t) })
		return !zs.IsZero() && (i == 0 || firings[i-1].Before(zs))
	}
	for f := rs.Next(start); !f.IsZero() && f.Before(end); f = rs.Next(f) {
		f = f.UTC()
		s := os.Slot(f)
		ok := s.Equal(f) ||
			// A repeated wall time (the clocks went back): the first pass's
			// slot, an earlier firing. In a zone whose clocks move by 30
			// minutes, robfig/cron's hour steps (elapsed hours) also fire up to
			// 30 minutes late after a change: that maps to the time it was for.
			s.Before(f) && (fired[s] && repeatedWall(f, sloc) || halfHour && changedSince(f) && f.Sub(s) <= 30*time.Minute)
		fired[f] = true
		firings = append(firings, f)
		if ok {
			continue
		}
		t.Errorf("%q in %s: robfig/cron fires at %s (%s), ormlock's slot is %s", expr, z, f, f.In(sloc), s)
		return true
	}
	jumps, missed := 0, 0
	for s := ormlock.NextSlot(os, start); !s.IsZero() && s.Before(end); s = ormlock.NextSlot(os, s) {
		if fired[s] {
			continue
		}
		// the instant the clocks jump forward over a scheduled wall time,
		// which robfig/cron skips
		l := s.In(sloc)
		zs, _ := l.ZoneBounds()
		_, off := l.Zone()
		_, prev := s.Add(-time.Nanosecond).In(sloc).Zone()
		if zs.Equal(s) && prev < off {
			jumps++
			continue
		}
		// robfig/cron's elapsed-hour steps miss scheduled times after a
		// 30-minute clock change
		if halfHour && changedSince(s) {
			missed++
			continue
		}
		t.Errorf("%q in %s: ormlock's slot %s (%s) is no robfig/cron firing", expr, z, s, l)
		return true
	}
	if testing.Verbose() && (jumps > 0 || missed > 0) {
		t.Logf("%q in %s: %d firings; %d slots at a forward jump, %d missed by robfig/cron", expr, z, len(fired), jumps, missed)
	}
	return true
}

// repeatedWall reports whether f's wall-clock time already occurred before f
// (the clocks went back over it).
func repeatedWall(f time.Time, loc *time.Location) bool {
	l := f.In(loc)
	zs, _ := l.ZoneBounds()
	if zs.IsZero() {
		return false
	}
	_, off := l.Zone()
	_, prev := zs.Add(-time.Nanosecond).In(loc).Zone()
	return prev > off && f.Before(zs.Add(time.Duration(prev-off)*time.Second))
}

// halfHourZone reports whether loc's clocks move by less than an hour
// (Australia/Lord_Howe).
func halfHourZone(loc *time.Location) bool {
	_, a := time.Date(2025, 1, 15, 0, 0, 0, 0, loc).Zone()
	_, b := time.Date(2025, 7, 15, 0, 0, 0, 0, loc).Zone()
	d := a - b
	return d != 0 && d != 3600 && d != -3600
}

// generatedCron returns n distinct random expressions built from the
// dialect's pieces, valid and invalid alike (acceptance must agree too). The
// minute field is kept sparse so that two years of firings stay cheap.
func generatedCron(r *rand.Rand, n int) []string {
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	num := func(lo, hi int) int { return lo + r.IntN(hi-lo+1) }
	field := func(lo, hi int, names []string, star bool) string {
		switch r.IntN(9) {
		case 0:
			if star {
				return pick("*", "?", "*/1")
			}
			return fmt.Sprint(num(lo, hi))
		case 1:
			return fmt.Sprintf("*/%d", num(2, hi-lo+2))
		case 2:
			a := num(lo, hi)
			return fmt.Sprintf("%d-%d", a, num(a, hi))
		case 3:
			a := num(lo, hi)
			return fmt.Sprintf("%d-%d/%d", a, num(a, hi), num(1, 5))
		case 4:
			return fmt.Sprintf("%d/%d", num(lo, hi), num(2, 9))
		case 5:
			return fmt.Sprintf("%d,%d", num(lo, hi), num(lo, hi))
		case 6:
			if names != nil {
				return names[r.IntN(len(names))]
			}
			return fmt.Sprint(num(lo, hi))
		case 7: // out of range or malformed, sometimes
			return pick(fmt.Sprint(hi+1), fmt.Sprint(lo), fmt.Sprintf("%d-%d", hi, lo), "*/0", fmt.Sprint(num(lo, hi)))
		default:
			return fmt.Sprint(num(lo, hi))
		}
	}
	months := []string{"JAN", "feb", "Mar", "APR-JUN", "jul,aug", "SEP-DEC/2", "nov"}
	days := []string{"MON", "tue", "Wed-Fri", "sat,SUN", "MON-FRI/2", "thu"}
	seen := map[string]bool{}
	var out []string
	for len(out) < n {
		minute := pick(fmt.Sprint(num(0, 59)), fmt.Sprintf("%d,%d", num(0, 59), num(0, 59)), fmt.Sprintf("*/%d", num(30, 61)), "60", fmt.Sprintf("%d-%d/%d", num(0, 10), num(30, 40), num(30, 40)))
		e := strings.Join([]string{
			minute,
			field(0, 23, nil, true),
			field(1, 31, nil, true),
			field(1, 12, months, true),
			field(0, 6, days, true),
		}, " ")
		if !seen[e] {
			seen[e] = true
			out = append(out, e)
		}
	}
	return out
}
