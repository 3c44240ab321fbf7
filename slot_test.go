package ormlock_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // zone data for the DST tests, whatever the machine has

	"github.com/ormlock/ormlock"
)

func utc(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v.UTC()
}

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Skipf("time zone data for %s not available: %v", name, err)
	}
	return loc
}

func every(t *testing.T, d time.Duration, loc *time.Location) ormlock.Schedule {
	t.Helper()
	s, err := ormlock.Every(d, loc)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func cron(t *testing.T, expr string, loc *time.Location) ormlock.Schedule {
	t.Helper()
	s, err := ormlock.Cron(expr, loc)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// slotCase: a trigger time and the slot it must map to (both RFC 3339).
type slotCase struct{ trigger, want string }

func checkSlots(t *testing.T, s ormlock.Schedule, cases []slotCase) {
	t.Helper()
	for _, c := range cases {
		got := s.Slot(utc(t, c.trigger))
		if want := utc(t, c.want); !got.Equal(want) || got.Location() != time.UTC {
			t.Errorf("%v: Slot(%s) = %s, want %s (UTC)", s, c.trigger, got.Format(time.RFC3339Nano), c.want)
		}
	}
}

func TestEveryDayBerlin(t *testing.T) {
	berlin := zone(t, "Europe/Berlin")
	s := every(t, 24*time.Hour, berlin)
	checkSlots(t, s, []slotCase{
		// an ordinary winter midnight (CET, UTC+1): on time, early, late
		{"2025-01-15T23:00:00Z", "2025-01-15T23:00:00Z"},
		{"2025-01-15T22:59:59.7Z", "2025-01-15T23:00:00Z"}, // 300ms early
		{"2025-01-15T23:00:05Z", "2025-01-15T23:00:00Z"},   // 5s late
		{"2025-01-16T09:00:00Z", "2025-01-15T23:00:00Z"},   // catch-up 10h late
		{"2025-01-16T22:59:50Z", "2025-01-15T23:00:00Z"},   // 10s before the next: still today
		{"2025-01-16T22:59:55Z", "2025-01-16T23:00:00Z"},   // SlotTolerance before the next
		// summer (CEST, UTC+2)
		{"2025-07-01T22:00:00.3Z", "2025-07-01T22:00:00Z"},
		// the day the clocks go forward (30 March 2025, 23h long) and the
		// day after
		{"2025-03-29T23:00:00Z", "2025-03-29T23:00:00Z"},
		{"2025-03-30T21:59:59.9Z", "2025-03-30T22:00:00Z"},
		{"2025-03-30T21:59:00Z", "2025-03-29T23:00:00Z"},
		// the day the clocks go back (26 October 2025, 25h long)
		{"2025-10-25T22:00:00Z", "2025-10-25T22:00:00Z"},
		{"2025-10-26T22:30:00Z", "2025-10-25T22:00:00Z"},
		{"2025-10-26T23:00:00Z", "2025-10-26T23:00:00Z"},
	})
}

func TestEveryHourDST(t *testing.T) {
	berlin := zone(t, "Europe/Berlin")
	s := every(t, time.Hour, berlin)
	checkSlots(t, s, []slotCase{
		// 30 March 2025: 02:00 CET jumps to 03:00 CEST (01:00Z). The local
		// times 02:00-02:59 do not exist; their slot is the jump.
		{"2025-03-30T00:00:01Z", "2025-03-30T00:00:00Z"}, // 01:00 CET
		{"2025-03-30T00:59:59Z", "2025-03-30T01:00:00Z"}, // early for 03:00 CEST
		{"2025-03-30T01:00:00Z", "2025-03-30T01:00:00Z"}, // 03:00 CEST
		{"2025-03-30T01:30:00Z", "2025-03-30T01:00:00Z"},
		{"2025-03-30T02:00:00Z", "2025-03-30T02:00:00Z"}, // 04:00 CEST
		// 26 October 2025: 03:00 CEST goes back to 02:00 CET (01:00Z). The
		// local hour 02:00-02:59 happens twice: one slot, its first pass.
		{"2025-10-26T00:00:00Z", "2025-10-26T00:00:00Z"}, // 02:00 CEST
		{"2025-10-26T01:00:00Z", "2025-10-26T00:00:00Z"}, // 02:00 CET, second pass
		{"2025-10-26T01:59:57Z", "2025-10-26T02:00:00Z"}, // early for 03:00 CET
		{"2025-10-26T02:00:00Z", "2025-10-26T02:00:00Z"}, // 03:00 CET
	})
	ny := zone(t, "America/New_York")
	s6 := every(t, 6*time.Hour, ny)
	checkSlots(t, s6, []slotCase{
		// 9 March 2025: 02:00 EST -> 03:00 EDT. Local 00, 06, 12, 18.
		{"2025-03-09T05:00:00Z", "2025-03-09T05:00:00Z"}, // 00:00 EST
		{"2025-03-09T09:59:58Z", "2025-03-09T10:00:00Z"}, // early for 06:00 EDT
		{"2025-03-09T10:00:00Z", "2025-03-09T10:00:00Z"},
		{"2025-03-09T16:00:03Z", "2025-03-09T16:00:00Z"}, // 12:00 EDT
		// 2 November 2025: 02:00 EDT -> 01:00 EST.
		{"2025-11-02T04:00:00Z", "2025-11-02T04:00:00Z"}, // 00:00 EDT
		{"2025-11-02T10:59:00Z", "2025-11-02T04:00:00Z"},
		{"2025-11-02T11:00:00Z", "2025-11-02T11:00:00Z"}, // 06:00 EST
	})
}

func TestEveryMultiDay(t *testing.T) {
	s := every(t, 48*time.Hour, nil) // nil location is UTC
	checkSlots(t, s, []slotCase{
		{"1970-01-01T00:00:00Z", "1970-01-01T00:00:00Z"},
		{"1970-01-02T12:00:00Z", "1970-01-01T00:00:00Z"},
		{"1970-01-03T00:00:00Z", "1970-01-03T00:00:00Z"},
		{"1969-12-31T12:00:00Z", "1969-12-30T00:00:00Z"},
	})
	week := every(t, 7*24*time.Hour, time.UTC)
	if got := week.Slot(utc(t, "2025-06-15T12:00:00Z")); got.Weekday() != time.Thursday {
		t.Errorf("Every(168h) slot %v is a %v, want the Thursdays counted from 1970-01-01", got, got.Weekday())
	}
}

func TestCronDST(t *testing.T) {
	berlin := zone(t, "Europe/Berlin")
	s := cron(t, "30 2 * * *", berlin)
	checkSlots(t, s, []slotCase{
		{"2025-03-29T01:30:00Z", "2025-03-29T01:30:00Z"}, // 02:30 CET
		// 30 March: 02:30 does not exist; the slot is the jump at 03:00 CEST,
		// whether the scheduler fires then or at 03:30 CEST.
		{"2025-03-30T01:00:00Z", "2025-03-30T01:00:00Z"},
		{"2025-03-30T01:30:00Z", "2025-03-30T01:00:00Z"},
		{"2025-03-31T00:30:00Z", "2025-03-31T00:30:00Z"}, // 02:30 CEST
		// 26 October: 02:30 happens twice; both triggers get one slot.
		{"2025-10-26T00:30:00Z", "2025-10-26T00:30:00Z"}, // 02:30 CEST
		{"2025-10-26T01:30:00Z", "2025-10-26T00:30:00Z"}, // 02:30 CET
		{"2025-10-27T01:30:00Z", "2025-10-27T01:30:00Z"},
	})
	ny := zone(t, "America/New_York")
	checkSlots(t, cron(t, "0 2 * * *", ny), []slotCase{
		{"2025-03-09T07:00:00Z", "2025-03-09T07:00:00Z"}, // 02:00 EST does not exist: 03:00 EDT
		{"2025-11-02T07:00:00Z", "2025-11-02T07:00:00Z"}, // 02:00 EST, once
	})
	checkSlots(t, cron(t, "0 1 * * *", ny), []slotCase{
		{"2025-11-02T05:00:00Z", "2025-11-02T05:00:00Z"}, // 01:00 EDT
		{"2025-11-02T06:00:00Z", "2025-11-02T05:00:00Z"}, // 01:00 EST, repeated
		{"2025-03-09T06:00:00Z", "2025-03-09T06:00:00Z"}, // 01:00 EST
	})
	// a zone whose clocks skip midnight (Santiago, 7 September 2025, 00:00
	// -> 01:00): the daily slot is the jump, and the day is not skipped
	santiago := zone(t, "America/Santiago")
	checkSlots(t, every(t, 24*time.Hour, santiago), []slotCase{
		{"2025-09-07T04:00:00Z", "2025-09-07T04:00:00Z"},
		{"2025-09-07T10:00:00Z", "2025-09-07T04:00:00Z"},
		{"2025-09-06T04:00:00Z", "2025-09-06T04:00:00Z"},
	})
}

func TestCronFields(t *testing.T) {
	cases := []struct {
		expr  string
		cases []slotCase
	}{
		{"*/15 * * * *", []slotCase{
			{"2025-05-05T10:14:59Z", "2025-05-05T10:15:00Z"},
			{"2025-05-05T10:29:00Z", "2025-05-05T10:15:00Z"},
		}},
		// weekdays 9-17 every 2 hours: 9, 11, 13, 15, 17; Saturday maps back
		// to Friday 17:00 (2025-05-09 is a Friday)
		{"0 9-17/2 * * MON-FRI", []slotCase{
			{"2025-05-09T12:00:00Z", "2025-05-09T11:00:00Z"},
			{"2025-05-10T12:00:00Z", "2025-05-09T17:00:00Z"},
			{"2025-05-12T08:59:58Z", "2025-05-12T09:00:00Z"},
		}},
		{"0 0 1,15 * *", []slotCase{
			{"2025-05-14T00:00:00Z", "2025-05-01T00:00:00Z"},
			{"2025-05-15T00:00:00Z", "2025-05-15T00:00:00Z"},
		}},
		// both day fields restricted: the 13th OR a Friday
		{"0 0 13 * 5", []slotCase{
			{"2025-05-13T10:00:00Z", "2025-05-13T00:00:00Z"}, // a Tuesday, the 13th
			{"2025-05-10T10:00:00Z", "2025-05-09T00:00:00Z"}, // Saturday -> Friday 9th
		}},
		// robfig/cron: */2 restricts the day of month, so with a weekday
		// it is OR: odd days or Mondays
		{"0 0 */2 * 1", []slotCase{
			{"2025-05-20T00:00:00Z", "2025-05-19T00:00:00Z"}, // Mon 19th (odd)
			{"2025-05-13T00:00:00Z", "2025-05-13T00:00:00Z"}, // Tue 13th (odd)
			{"2025-05-12T10:00:00Z", "2025-05-12T00:00:00Z"}, // Mon 12th (even)
			{"2025-05-31T10:00:00Z", "2025-05-31T00:00:00Z"}, // Sat 31st
			{"2025-06-01T10:00:00Z", "2025-06-01T00:00:00Z"}, // Sun 1st
			{"2025-06-02T10:00:00Z", "2025-06-02T00:00:00Z"}, // Mon 2nd
			{"2025-06-04T10:00:00Z", "2025-06-03T00:00:00Z"}, // Wed 4th: back to Tue 3rd
		}},
		// a starred day field (* or ?, no step above 1) makes it AND
		{"0 0 */1 * 1", []slotCase{{"2025-05-13T00:00:00Z", "2025-05-12T00:00:00Z"}}},
		// the seconds are robfig/cron's: none in the standard dialect
		{"@daily", []slotCase{{"2025-05-13T00:00:00.5Z", "2025-05-13T00:00:00Z"}}},
		{"0 0 29 2 *", []slotCase{
			{"2025-06-01T00:00:00Z", "2024-02-29T00:00:00Z"},
			{"2028-02-29T00:00:03Z", "2028-02-29T00:00:00Z"},
		}},
		{"0 0 * * sun", []slotCase{{"2025-05-13T00:00:00Z", "2025-05-11T00:00:00Z"}}},
		{"@weekly", []slotCase{{"2025-05-13T00:00:00Z", "2025-05-11T00:00:00Z"}}},
		{"@monthly", []slotCase{{"2025-05-13T00:00:00Z", "2025-05-01T00:00:00Z"}}},
		{"@yearly", []slotCase{{"2025-05-13T00:00:00Z", "2025-01-01T00:00:00Z"}}},
		{"@hourly", []slotCase{{"2025-05-13T07:59:59.5Z", "2025-05-13T08:00:00Z"}}},
		{"0 0 1 jan,Jul *", []slotCase{{"2025-05-13T00:00:00Z", "2025-01-01T00:00:00Z"}}},
		{"5/20 * * * *", []slotCase{{"2025-05-13T00:50:00Z", "2025-05-13T00:45:00Z"}}}, // 5, 25, 45
		{"0 0 ? * MON", []slotCase{{"2025-05-13T00:00:00Z", "2025-05-12T00:00:00Z"}}},
		{"59 23 31 12 *", []slotCase{{"2025-12-31T23:59:56Z", "2025-12-31T23:59:00Z"}}},
		// a per-minute schedule: the tolerance shrinks to half a minute
		{"* * * * *", []slotCase{
			{"2025-05-13T00:00:29Z", "2025-05-13T00:00:00Z"},
			{"2025-05-13T00:00:56Z", "2025-05-13T00:01:00Z"},
		}},
	}
	for _, c := range cases {
		checkSlots(t, cron(t, c.expr, time.UTC), c.cases)
	}
}

func TestCronBadExpressions(t *testing.T) {
	// robfig/cron's parser decides (and words) what is rejected; the test of
	// parity with it is cron_parity_test.go
	cases := []struct{ expr, want string }{
		{"", "empty spec string"},
		{"* * * *", "expected 5 to 6 fields"},
		{"0 0 0 * * * *", "expected 5 to 6 fields"},
		{"60 * * * *", "above maximum"},
		{"* 24 * * *", "above maximum"},
		{"0 0 0 * *", "below minimum"},
		{"0 0 32 * *", "above maximum"},
		{"0 0 * 13 *", "above maximum"},
		{"0 0 * * 7", "above maximum"}, // robfig/cron: day-of-week is 0-6
		{"0 0 * * 8", "above maximum"},
		{"5-1 * * * *", "beyond end of range"},
		{"*/0 * * * *", "step of range should be a positive number"},
		{"*/x * * * *", "failed to parse int"},
		{"a b c d e", "failed to parse int"},
		{"0 0 * FOO *", "failed to parse int"},
		{"0 0 * * FRIDAY", "failed to parse int"},
		{"1- * * * *", "failed to parse int"},
		{"0 0 L * *", "failed to parse int"},
		{"0 0 31 2 *", "never fires"},
		{"0 0 30 2 *", "never fires"},
		{"0 0 31 4,6,9,11 *", "never fires"},
		{"TZ=Nowhere/Else 0 0 * * *", "bad location"},
		{"CRON_TZ=UTC", "time zone prefix without an expression"},
		{"@every 500ms x", "failed to parse duration"},
		{"@reboot", "unrecognized descriptor"},
	}
	for _, c := range cases {
		s, err := ormlock.Cron(c.expr, time.UTC)
		if err == nil {
			t.Errorf("Cron(%q) = %v, want an error", c.expr, s)
			continue
		}
		if !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "ormlock: ") {
			t.Errorf("Cron(%q): %v\n  want ErrInvalidArgument mentioning %q", c.expr, err, c.want)
		}
	}
	// a day both restricted fields can reach is fine even in February
	if _, err := ormlock.Cron("0 0 31 2 MON", time.UTC); err != nil {
		t.Errorf("OR of day fields rejected: %v", err)
	}
}

// The zone prefix overrides loc, as it overrides gocron's location; @every
// is the epoch-anchored Every.
func TestCronPrefixAndEvery(t *testing.T) {
	s := cron(t, "CRON_TZ=America/New_York 0 0 * * *", time.UTC)
	checkSlots(t, s, []slotCase{{"2025-05-13T10:00:00Z", "2025-05-13T04:00:00Z"}})
	s = cron(t, "TZ=Asia/Kolkata @daily", nil)
	checkSlots(t, s, []slotCase{{"2025-05-13T10:00:00Z", "2025-05-12T18:30:00Z"}})
	s = cron(t, "@every 90s", zone(t, "Europe/Berlin"))
	if got, want := fmt.Sprint(s), "every 1m30s in UTC"; got != want {
		t.Errorf("@every 90s = %s, want %s", got, want)
	}
	checkSlots(t, s, []slotCase{
		{"1970-01-01T00:01:31Z", "1970-01-01T00:01:30Z"},
		{"2025-05-13T10:00:05Z", "2025-05-13T10:00:00Z"}, // 1747130400 = 90 * 19412560
		{"2025-05-13T10:01:29Z", "2025-05-13T10:01:30Z"}, // within SlotTolerance
	})
	// robfig/cron rounds @every down to whole seconds, and up to one
	if s := cron(t, "@every 1500ms", nil); fmt.Sprint(s) != "every 1s in UTC" {
		t.Errorf("@every 1500ms = %v, want every 1s", s)
	}
	sec, err := ormlock.Cron("*/20 0 0 * * *", nil) // six fields: the seconds dialect
	if err != nil {
		t.Fatal(err)
	}
	checkSlots(t, sec, []slotCase{
		{"2025-05-13T00:00:14Z", "2025-05-13T00:00:00Z"},
		{"2025-05-13T00:00:19Z", "2025-05-13T00:00:20Z"},
		{"2025-05-13T00:00:41Z", "2025-05-13T00:00:40Z"},
		{"2025-05-13T00:00:59Z", "2025-05-13T00:00:40Z"},
		{"2025-05-13T05:00:00Z", "2025-05-13T00:00:40Z"},
	})
	five, err := ormlock.Cron("30 1 * * *", nil) // five fields: seconds 0, in both dialects
	if err != nil {
		t.Fatal(err)
	}
	checkSlots(t, five, []slotCase{{"2025-05-13T02:00:00Z", "2025-05-13T01:30:00Z"}})
}

func TestEveryBadPeriods(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Hour, time.Millisecond, 999 * time.Millisecond, 1500 * time.Millisecond, 90*time.Second + 1} {
		if s, err := ormlock.Every(d, time.UTC); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Errorf("Every(%v) = %v, %v; want ErrInvalidArgument", d, s, err)
		} else {
			t.Logf("Every(%v): %v", d, err)
		}
	}
	for _, d := range []time.Duration{time.Second, 7 * time.Second, 90 * time.Second, 15 * time.Minute, 7 * time.Hour, 8 * time.Hour, 24 * time.Hour, 25 * time.Hour, 36 * time.Hour, 72 * time.Hour} {
		if _, err := ormlock.Every(d, time.UTC); err != nil {
			t.Errorf("Every(%v): %v", d, err)
		}
	}
}

// Properties over random times in zones with daylight saving: Slot is
// idempotent, monotone, never after t + SlotTolerance, and equal for Every
// and the equivalent cron expression; triggers a little early or late agree.
func TestSlotProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	start := utc(t, "2024-01-01T00:00:00Z")
	span := int64(2 * 365 * 24 * time.Hour)
	for _, name := range []string{"UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"} {
		loc := zone(t, name)
		pairs := []struct {
			d    time.Duration
			expr string
		}{
			{time.Hour, "0 * * * *"},
			{15 * time.Minute, "*/15 * * * *"},
			{24 * time.Hour, "0 0 * * *"},
			{6 * time.Hour, "0 */6 * * *"},
		}
		for _, p := range pairs {
			e, c := every(t, p.d, loc), cron(t, p.expr, loc)
			for range 400 {
				tt := start.Add(time.Duration(r.Int64N(span)))
				se, sc := e.Slot(tt), c.Slot(tt)
				if !se.Equal(sc) {
					t.Fatalf("%s: Every(%v).Slot(%v) = %v but Cron(%q) = %v", name, p.d, tt, se, p.expr, sc)
				}
				if se.After(tt.Add(ormlock.SlotTolerance)) {
					t.Fatalf("%s %v: Slot(%v) = %v is more than SlotTolerance after the trigger", name, p.d, tt, se)
				}
				if again := e.Slot(se); !again.Equal(se) {
					t.Fatalf("%s %v: Slot(Slot(%v)) = %v, want %v", name, p.d, tt, again, se)
				}
				if later := e.Slot(tt.Add(time.Minute)); later.Before(se) {
					t.Fatalf("%s %v: not monotone at %v", name, p.d, tt)
				}
				// a trigger at the slot, 300ms early or 5s late agrees
				for _, j := range []time.Duration{-300 * time.Millisecond, 5 * time.Second} {
					if got := e.Slot(se.Add(j)); !got.Equal(se) {
						t.Fatalf("%s %v: Slot(%v%+v) = %v, want %v", name, p.d, se, j, got, se)
					}
				}
			}
		}
	}
}

func TestScheduleString(t *testing.T) {
	berlin := zone(t, "Europe/Berlin")
	for s, want := range map[ormlock.Schedule]string{
		every(t, 24*time.Hour, berlin): "every 24h0m0s in Europe/Berlin",
		cron(t, "0 0 * * *", nil):      "0 0 * * * in UTC",
	} {
		if got := fmt.Sprint(s); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
}

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
