package schedtest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	_ "time/tzdata" // zone data for Europe/Berlin

	"github.com/go-co-op/gocron/v2"
	"github.com/jonboulle/clockwork"
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/gormsched"
)

// lockCounts counts what gocron's calls to the Lockers ended in: "run",
// "skip", "error", "unlocked".
type lockCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *lockCounts) add(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[what]++
}

func (c *lockCounts) get(what string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[what]
}

// countingLocker is a gocron.Locker that counts into c.
type countingLocker struct {
	l gocron.Locker
	c *lockCounts
}

func (cl countingLocker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	l, err := cl.l.Lock(ctx, key)
	switch {
	case err == nil:
		cl.c.add("run")
		return &countingLock{l: l, c: cl.c}, nil
	case errors.Is(err, ormlock.ErrAlreadyDone) || errors.Is(err, ormlock.ErrNotAcquired):
		cl.c.add("skip")
	default:
		cl.c.add("error")
	}
	return nil, err
}

type countingLock struct {
	l gocron.Lock
	c *lockCounts
}

func (l *countingLock) Unlock(ctx context.Context) error {
	defer l.c.add("unlocked")
	return l.l.Unlock(ctx)
}

// fakeClockCase is a cron job run by three real gocron schedulers with the
// Locker on one fake clock.
type fakeClockCase struct {
	name        string
	expr        string
	withSeconds bool
	zone        string
	start       time.Time // in UTC
	days        int
	policy      gocron.DaylightSavingsTimePolicy
	minFires    int
}

// Through three real gocron schedulers on a fake clock, every firing of the
// job runs exactly once, and its slot is the schedule's:
//
//   - "0 0 */2 * 1", the case that lost most runs when ormlock's cron dialect
//     differed from gocron's (robfig/cron: odd days OR Mondays);
//   - the seconds dialect across New York's clock changes: 01:30:15 happens
//     twice on 2 November 2031 (gocron fires once), 02:30:15 does not exist
//     on 9 March 2031 (gocron skips it, or with RunAfterTransition fires at
//     03:30:15, whose slot is the jump at 03:00).
func TestLockerGocronFakeClock(t *testing.T) {
	cases := []fakeClockCase{
		{name: "or-days", expr: "0 0 */2 * 1", zone: "Europe/Berlin", start: time.Date(2031, 5, 3, 10, 0, 0, 0, time.UTC), days: 28, minFires: 14},
		{name: "seconds-fall-back", expr: "15 30 1 * * *", withSeconds: true, zone: "America/New_York", start: time.Date(2031, 10, 30, 12, 0, 0, 0, time.UTC), days: 5, minFires: 5},
		{name: "seconds-spring-forward", expr: "15 30 1,2 * * *", withSeconds: true, zone: "America/New_York", start: time.Date(2031, 3, 7, 12, 0, 0, 0, time.UTC), days: 4, minFires: 7},
		{name: "run-after-transition", expr: "15 30 2 * * *", withSeconds: true, zone: "America/New_York", start: time.Date(2031, 3, 7, 12, 0, 0, 0, time.UTC), days: 4,
			policy: gocron.DaylightSavingsTimeRunAfterTransition, minFires: 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			forEachKind(t, func(t *testing.T, k testdb.Kind) { runFakeClock(t, k, c) })
		})
	}
}

func runFakeClock(t *testing.T, k testdb.Kind, c fakeClockCase) {
	t.Helper()
	ctx := context.Background()
	loc, err := time.LoadLocation(c.zone)
	if err != nil {
		t.Fatal(err)
	}
	job := jobName(t)
	sched, err := ormlock.Cron(c.expr, loc) // five fields, or six with seconds
	if err != nil {
		t.Fatal(err)
	}
	fc := clockwork.NewFakeClockAt(c.start)
	var tl tally
	var handled errs
	var scheds []gocron.Scheduler
	var jobs []gocron.Job
	var ledgerDB *gorm.DB
	counter := &lockCounts{n: map[string]int{}}
	for i := range 3 {
		db := openGorm(t, k)
		if i == 0 {
			migrate(t, db)
			ledgerDB = db
		}
		replica := fmt.Sprintf("replica-%c", 'a'+i)
		l, err := scheduler.NewLocker(gormsched.Backend(db, ormlock.WithOwner(replica)), sched,
			scheduler.WithClock(fc.Now), scheduler.WithErrorHandler(handled.handle))
		if err != nil {
			t.Fatal(err)
		}
		s, err := gocron.NewScheduler(gocron.WithClock(fc), gocron.WithLocation(loc), gocron.WithDistributedLocker(countingLocker{l, counter}))
		if err != nil {
			t.Fatal(err)
		}
		j, err := s.NewJob(gocron.CronJob(c.expr, c.withSeconds), gocron.NewTask(func() {
			tl.enter(replica)
			defer tl.exit()
		}), gocron.WithName(job), gocron.WithDaylightSavingsTimePolicy(c.policy))
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
		s.Start()
		scheds = append(scheds, s)
	}
	end := c.start.AddDate(0, 0, c.days)
	var firings []time.Time
	for {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := fc.BlockUntilContext(wctx, 3) // each scheduler armed its timer
		cancel()
		if err != nil {
			t.Fatalf("after %d firings: the schedulers did not arm their timers: %v", len(firings), err)
		}
		// each scheduler reschedules its job after a firing on its own
		// goroutine: wait until all three have, then they must agree
		var next time.Time
		for agreeBy := time.Now().Add(10 * time.Second); ; {
			var err error
			next, err = jobs[0].NextRun()
			if err != nil {
				t.Fatal(err)
			}
			agree, other := true, next
			for _, j := range jobs[1:] {
				if n, _ := j.NextRun(); !n.Equal(next) {
					agree, other = false, n
				}
			}
			if agree {
				break
			}
			if time.Now().After(agreeBy) {
				t.Fatalf("the schedulers disagree on the next run: %v and %v", next, other)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if !next.Before(end) {
			break
		}
		firings = append(firings, next)
		fc.Advance(next.Sub(fc.Now()) + 20*time.Millisecond) // timers fire a little late
		deadline := time.Now().Add(30 * time.Second)
		for counter.get("run")+counter.get("skip")+counter.get("error") < 3*len(firings) || counter.get("unlocked") < counter.get("run") {
			if time.Now().After(deadline) {
				t.Fatalf("firing %d at %s: gocron did not finish (%d runs)", len(firings), next, counter.get("run"))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for _, s := range scheds {
		if err := s.Shutdown(); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	}
	runs, maxHold := tl.snapshot()
	t.Logf("%q in %s: %d firings, %d runs, %d skips, %d errors", c.expr, c.zone, len(firings), len(runs), counter.get("skip"), counter.get("error"))
	if len(runs) != len(firings) || counter.get("run") != len(firings) || maxHold > 1 {
		t.Errorf("%d firings, %d runs (max %d at once); want one run per firing", len(firings), len(runs), maxHold)
	}
	if len(firings) < c.minFires {
		t.Errorf("only %d firings of %q", len(firings), c.expr)
	}
	// the ledger's slots are the schedule's slots of the firings
	ledger, err := gormlock.Runs(ledgerDB, job, 100)
	if err != nil {
		t.Fatal(err)
	}
	slots := map[time.Time]bool{}
	for _, r := range ledger {
		slots[r.Slot] = true
	}
	for _, f := range firings {
		if s := sched.Slot(f); !slots[s] {
			t.Errorf("firing %s (%s): no ledger run for its slot %s", f.UTC(), f.In(loc), s)
		} else if !s.Equal(f.UTC()) {
			t.Logf("firing %s maps to slot %s", f.In(loc), s.In(loc))
		}
	}
	for _, err := range handled.get() {
		t.Errorf("error handler: %v", err)
	}
}

// fire is one gocron firing as the executor makes it: Lock, the job, Unlock.
func fire(t *testing.T, l *scheduler.Locker, job string) error {
	t.Helper()
	lk, err := l.Lock(context.Background(), job)
	if err != nil {
		return err
	}
	return lk.Unlock(context.Background())
}

// A job whose trigger fires more often than the schedule its Locker maps it
// by is reported — naming the job and the schedule — at the latest on its
// second repeat within one slot, and a trigger twice as dense as the
// schedule (one repeat per slot) at the first repeat of its second slot;
// the skips themselves stay silent.
func TestLockerReportsDenseTrigger(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := openMigrated(t, k)
		daily, err := ormlock.Cron("0 0 * * *", time.UTC)
		if err != nil {
			t.Fatal(err)
		}
		var now atomic.Int64
		now.Store(time.Date(2031, 5, 7, 10, 0, 0, 0, time.UTC).UnixNano())
		var handled errs
		l, err := scheduler.NewLocker(gormsched.Backend(db), daily, scheduler.WithErrorHandler(handled.handle),
			scheduler.WithClock(func() time.Time { return time.Unix(0, now.Load()) }))
		if err != nil {
			t.Fatal(err)
		}
		job := jobName(t)
		if err := fire(t, l, job); err != nil {
			t.Fatal(err)
		}
		now.Add(int64(2 * time.Second))
		if err := fire(t, l, job); !errors.Is(err, ormlock.ErrAlreadyDone) {
			t.Fatalf("second firing in the slot: %v, want ErrAlreadyDone", err)
		}
		if got := handled.get(); len(got) != 0 {
			t.Fatalf("one repeat reported already: %v", got)
		}
		now.Add(int64(2 * time.Second))
		_ = fire(t, l, job)
		got := handled.get()
		if len(got) != 1 || !strings.Contains(got[0].Error(), job) || !strings.Contains(got[0].Error(), "0 0 * * * in UTC") ||
			!strings.Contains(got[0].Error(), "WithJobSchedule") {
			t.Fatalf("reported %v, want one error naming the job, the schedule and WithJobSchedule", got)
		}
		_ = fire(t, l, job) // once per slot
		if n := len(handled.get()); n != 1 {
			t.Fatalf("%d reports in one slot", n)
		}

		// twice as dense: one repeat per slot, reported in the second
		hourly := everyHour(t)
		var handled2 errs
		l2, err := scheduler.NewLocker(gormsched.Backend(db), hourly, scheduler.WithErrorHandler(handled2.handle),
			scheduler.WithClock(func() time.Time { return time.Unix(0, now.Load()) }))
		if err != nil {
			t.Fatal(err)
		}
		job2 := job + "-half"
		for i := range 4 { // :00 and :30 of two hours
			_ = fire(t, l2, job2)
			if n := len(handled2.get()); (i < 3 && n != 0) || (i == 3 && n != 1) {
				t.Fatalf("after firing %d: %d reports (%v)", i+1, n, handled2.get())
			}
			now.Add(int64(30 * time.Minute))
		}
	})
}

// WithStrict: a Locker without a default schedule refuses, through Lock and
// the error handler, a job it has no WithJobSchedule for, and runs those it
// has; without WithStrict a nil default is refused at construction. Tested
// with a real gocron scheduler.
func TestLockerStrict(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := openMigrated(t, k)
		if _, err := scheduler.NewLocker(gormsched.Backend(db), nil); !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "WithStrict") {
			t.Fatalf("nil default without WithStrict: %v", err)
		}
		known, unknown := jobName(t)+"-known", jobName(t)+"-unknown"
		// a JobWrapper takes a nil schedule from WithJobSchedule, and
		// refuses a job with neither
		if _, err := scheduler.JobWrapper(gormsched.Backend(db), unknown, nil, scheduler.WithStrict()); !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "WithJobSchedule") {
			t.Fatalf("JobWrapper without a schedule: %v", err)
		}
		if _, err := scheduler.JobWrapper(gormsched.Backend(db), known, nil, scheduler.WithStrict(), scheduler.WithJobSchedule(known, everySecond(t))); err != nil {
			t.Fatalf("JobWrapper with WithJobSchedule: %v", err)
		}
		var handled errs
		l, err := scheduler.NewLocker(gormsched.Backend(db), nil, scheduler.WithStrict(),
			scheduler.WithJobSchedule(known, everySecond(t)), scheduler.WithErrorHandler(handled.handle))
		if err != nil {
			t.Fatal(err)
		}
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(l))
		if err != nil {
			t.Fatal(err)
		}
		ran := make(chan string, 4)
		for _, name := range []string{known, unknown} {
			if _, err := s.NewJob(gocron.DurationJob(time.Hour), gocron.NewTask(func() { ran <- name }), gocron.WithName(name),
				gocron.WithStartAt(gocron.WithStartImmediately())); err != nil {
				t.Fatal(err)
			}
		}
		s.Start()
		if got := <-ran; got != known {
			t.Fatalf("ran %q", got)
		}
		for deadline := time.Now().Add(10 * time.Second); len(handled.get()) == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		}
		if err := s.Shutdown(); err != nil {
			t.Fatal(err)
		}
		got := handled.get()
		if len(got) != 1 || !errors.Is(got[0], ormlock.ErrInvalidArgument) || !strings.Contains(got[0].Error(), unknown) {
			t.Fatalf("reported %v, want the unknown job refused", got)
		}
		if len(ran) != 0 {
			t.Fatalf("the job without a schedule ran")
		}
	})
}
