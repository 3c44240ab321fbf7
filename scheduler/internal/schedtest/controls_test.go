package schedtest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	"github.com/robfig/cron/v3"
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/gormsched"
	"github.com/ormlock/ormlock/scheduler/sqlsched"
	"github.com/ormlock/ormlock/sqllock"
)

// The operators' controls against three running replicas of a scheduler,
// each with its own pool and adapter, a job every second, as operators use
// them: pause the job and every replica skips its next firings (no run,
// each slot recorded 'skipped' with the pause's author and reason; the
// replica whose claim records it gets ErrPaused, the others the lock held
// or the row skipped; none is reported as a failure); resume
// it under catch-up and no paused slot runs; rerun a failed slot and it
// runs exactly once, on some replica's next firing; skip a future slot and
// it never runs.

// controlled is one scheduler set-up under test: three replicas started,
// an operator's Act, and the ledger's rows of the job.
type controlled struct {
	job  string
	act  func(a ormlock.Action) (ormlock.ActionRecord, error)
	runs func() ([]ormlock.Run, error)
	// fail records the slot failed in the ledger before the replicas
	// start (a run whose job returned an error)
	fail func(slot time.Time) error
	// start starts the three replicas, each calling ran for every run of
	// the job, and returns what stops them (waiting for their runs)
	start func(ran func(replica string, slot time.Time, ok bool)) (stop func())
	// pausedSeen reports how many firings of each replica returned an
	// error wrapping ormlock.ErrPaused
	pausedSeen func() map[string]int
	handled    *errs
}

// slotRuns counts the job's runs per slot, in process.
type slotRuns struct {
	mu    sync.Mutex
	runs  map[time.Time][]string
	noSlt []string // runs that could not read their slot
}

func (s *slotRuns) ran(replica string, slot time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ok {
		s.noSlt = append(s.noSlt, replica)
		return
	}
	if s.runs == nil {
		s.runs = map[time.Time][]string{}
	}
	s.runs[slot.UTC()] = append(s.runs[slot.UTC()], replica)
}

func (s *slotRuns) of(slot time.Time) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.runs[slot.UTC()]...)
}

func (s *slotRuns) slots() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []time.Time
	for t := range s.runs {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// testControls runs the scenario on c.
func testControls(t *testing.T, c controlled) {
	failed := time.Now().UTC().Truncate(time.Second).Add(-30 * time.Second) // out of the catch-up window
	if err := c.fail(failed); err == nil || !strings.Contains(err.Error(), "settlement failed") {
		t.Fatalf("the failing run of %s: %v", failed.Format(time.RFC3339), err)
	}
	var sr slotRuns
	stop := c.start(sr.ran)
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	act := func(a ormlock.Action) ormlock.ActionRecord {
		t.Helper()
		rec, err := c.act(a)
		if err != nil {
			t.Fatalf("Act(%s): %v", a.Kind, err)
		}
		return rec
	}
	time.Sleep(1500 * time.Millisecond) // the job runs

	act(ormlock.Pause(c.job).By("alice", "incident 42"))
	pausedAt := time.Now()
	time.Sleep(3600 * time.Millisecond)
	resumeAt := time.Now()
	act(ormlock.Resume(c.job).By("alice", "incident 42 over"))
	act(ormlock.Rerun(c.job, failed).By("bob", "the settlement of "+failed.Format(time.RFC3339)))
	future := time.Now().UTC().Truncate(time.Second).Add(2 * time.Second)
	act(ormlock.Skip(c.job, future).By("carol", "bank holiday"))
	time.Sleep(time.Until(future.Add(1500 * time.Millisecond)))
	stop()
	stopped = true

	// the paused slots: their firings came after the pause was
	// committed, and a second before the resume
	var paused []time.Time
	for s := pausedAt.UTC().Add(1200 * time.Millisecond).Truncate(time.Second); !s.Add(time.Second).After(resumeAt); s = s.Add(time.Second) {
		paused = append(paused, s)
	}
	if len(paused) < 2 {
		t.Fatalf("only %d slots fell wholly within the pause (%s to %s): the machine is too slow for this test", len(paused), pausedAt.Format(time.RFC3339Nano), resumeAt.Format(time.RFC3339Nano))
	}
	rows, err := c.runs()
	if err != nil {
		t.Fatalf("Runs: %v", err)
	}
	ledger := map[time.Time]ormlock.Run{}
	for _, r := range rows {
		ledger[r.Slot.UTC()] = r
	}
	for _, s := range paused {
		if who := sr.of(s); len(who) > 0 {
			t.Errorf("paused slot %s ran on %v", s.Format(time.RFC3339), who)
		}
		r, ok := ledger[s]
		switch {
		case !ok:
			t.Errorf("paused slot %s: no ledger row (want 'skipped')", s.Format(time.RFC3339))
		case r.Status != "skipped" || !strings.Contains(r.Error, "alice") || !strings.Contains(r.Error, "incident 42"):
			t.Errorf("paused slot %s: status %q, error %q; want 'skipped' naming the pause's author and reason", s.Format(time.RFC3339), r.Status, r.Error)
		}
	}
	if who := sr.of(failed); len(who) != 1 {
		t.Errorf("the failed slot %s asked to rerun ran %d times (%v), want once", failed.Format(time.RFC3339), len(who), who)
	}
	if r := ledger[failed]; r.Status != "done" {
		t.Errorf("the rerun slot %s: status %q (error %q), want done", failed.Format(time.RFC3339), r.Status, r.Error)
	}
	if who := sr.of(future); len(who) > 0 {
		t.Errorf("the skipped slot %s ran on %v", future.Format(time.RFC3339), who)
	}
	if r := ledger[future]; r.Status != "skipped" || !strings.Contains(r.Error, "bank holiday") {
		t.Errorf("the skipped slot %s: status %q, error %q; want 'skipped' with the reason", future.Format(time.RFC3339), r.Status, r.Error)
	}
	// exactly once, and alive after the resume
	after := 0
	for _, s := range sr.slots() {
		if who := sr.of(s); len(who) > 1 {
			t.Errorf("slot %s ran %d times: %v", s.Format(time.RFC3339), len(who), who)
		}
		if s.After(resumeAt) {
			after++
		}
		if r := ledger[s]; r.Status != "done" {
			t.Errorf("slot %s ran; its ledger row is %q (error %q)", s.Format(time.RFC3339), r.Status, r.Error)
		}
	}
	if after < 1 {
		t.Errorf("%d slots ran after the resume, want at least 1", after)
	}
	if len(sr.noSlt) > 0 {
		t.Errorf("runs on %v could not read their slot", sr.noSlt)
	}
	// Each paused slot's firings: one replica's claim records it skipped
	// and returns ErrPaused; the others' find its lock held
	// (ErrNotAcquired) or its row skipped (ErrAlreadyDone): skips all.
	seen, total := c.pausedSeen(), 0
	for _, n := range seen {
		total += n
	}
	if total < len(paused) {
		t.Errorf("%d firings skipped with ErrPaused (%v), want at least one per paused slot (%d)", total, seen, len(paused))
	}
	for _, err := range c.handled.get() {
		t.Errorf("error handler: %v", err)
	}
	t.Logf("%d slots ran, paused %d (%s to %s), rerun %s, skipped %s",
		len(sr.slots()), len(paused), paused[0].Format("15:04:05"), paused[len(paused)-1].Format("15:04:05"), failed.Format("15:04:05"), future.Format("15:04:05"))
}

// errSettlement is the job's error in the failed run.
var errSettlement = errors.New("settlement failed")

// pausedCount counts, per replica, the firings skipped with an error
// wrapping ormlock.ErrPaused.
type pausedCount struct {
	mu sync.Mutex
	n  map[string]int
}

func (p *pausedCount) add(replica string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == nil {
		p.n = map[string]int{}
	}
	p.n[replica]++
}

func (p *pausedCount) get() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for k, v := range p.n {
		out[k] = v
	}
	return out
}

// Three gocron schedulers on GORM, each its own Locker with
// ormlock.WithCatchUp(…, CatchUpLatest) (a Locker's policy): two wrap the
// job with Locker.Task (ormlock.Slot(ctx) is the run's slot, a rerun's
// too), one runs it unwrapped (it reads Locker.Slot, and runs a rerun in
// place of a firing whose own slot is taken).
func TestControlsGocron(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		admin := openMigrated(t, k)
		job := jobName(t)
		var handled errs
		var seen pausedCount
		c := controlled{
			job:     job,
			handled: &handled,
			act: func(a ormlock.Action) (ormlock.ActionRecord, error) {
				return gormlock.Act(admin, a)
			},
			runs: func() ([]ormlock.Run, error) { return gormlock.Runs(admin, job, 1000) },
			fail: func(slot time.Time) error {
				return gormlock.RunOnce(admin, job, slot, func(*gorm.DB) error { return errSettlement }, ormlock.WithClaim())
			},
			pausedSeen: seen.get,
		}
		c.start = func(ran func(replica string, slot time.Time, ok bool)) func() {
			var scheds []gocron.Scheduler
			for i := range 3 {
				replica := fmt.Sprintf("replica-%c", 'a'+i)
				b := gormsched.Backend(openGorm(t, k), ormlock.WithOwner(replica), ormlock.WithCatchUp(10*time.Second, ormlock.CatchUpLatest))
				l, err := scheduler.NewLocker(b, everySecond(t), scheduler.WithErrorHandler(handled.handle))
				if err != nil {
					t.Fatal(err)
				}
				s, err := gocron.NewScheduler(gocron.WithDistributedLocker(l), gocron.WithGlobalJobOptions(l.RecordFailures()))
				if err != nil {
					t.Fatal(err)
				}
				task := gocron.NewTask(l.Task(job, func(ctx context.Context) error {
					slot, ok := ormlock.Slot(ctx)
					ran(replica, slot, ok)
					return nil
				}))
				if i == 2 {
					task = gocron.NewTask(func() {
						slot, ok := l.Slot(job)
						ran(replica, slot, ok)
					})
				}
				// how a program sees its paused firings: gocron's listener
				// of the Locker's errors
				paused := gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) {
					if errors.Is(err, ormlock.ErrPaused) {
						seen.add(replica)
					}
				})
				if _, err := s.NewJob(gocron.CronJob("* * * * * *", true), task, gocron.WithName(job), gocron.WithEventListeners(paused)); err != nil {
					t.Fatal(err)
				}
				s.Start()
				scheds = append(scheds, s)
				time.Sleep(200 * time.Millisecond)
			}
			return func() {
				for _, s := range scheds {
					if err := s.Shutdown(); err != nil {
						t.Errorf("Shutdown: %v", err)
					}
				}
			}
		}
		testControls(t, c)
	})
}

// Three robfig/cron instances on database/sql, each its own JobWrapper
// with ormlock.WithCatchUp(…, CatchUpAll): every firing catches up every
// slot of the window that has not run, and still no paused or skipped
// slot runs.
func TestControlsRobfig(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		admin := testdb.Open(t, k)
		t.Cleanup(func() { testdb.AssertNoLeaks(t, k, admin) })
		if err := sqllock.Migrate(ctx, admin); err != nil {
			t.Fatal(err)
		}
		job := jobName(t)
		var handled errs
		var seen pausedCount
		c := controlled{
			job:     job,
			handled: &handled,
			act: func(a ormlock.Action) (ormlock.ActionRecord, error) {
				return sqllock.Act(ctx, admin, a)
			},
			runs: func() ([]ormlock.Run, error) { return sqllock.Runs(ctx, admin, job, 1000) },
			fail: func(slot time.Time) error {
				return sqllock.RunOnce(ctx, admin, job, slot, func(context.Context, *sql.Tx) error { return errSettlement }, ormlock.WithClaim())
			},
			pausedSeen: seen.get,
		}
		c.start = func(ran func(replica string, slot time.Time, ok bool)) func() {
			var crons []*cron.Cron
			for i := range 3 {
				replica := fmt.Sprintf("replica-%c", 'a'+i)
				db := testdb.Open(t, k)
				t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
				b := sqlsched.Backend(db, ormlock.WithOwner(replica), ormlock.WithCatchUp(10*time.Second, ormlock.CatchUpAll))
				w, err := scheduler.JobWrapper(b, job, everySecond(t), scheduler.WithErrorHandler(handled.handle),
					scheduler.WithCronLogger(pausedLog{replica, &seen}))
				if err != nil {
					t.Fatal(err)
				}
				cr := cron.New(cron.WithSeconds())
				if _, err := cr.AddJob("* * * * * *", cron.NewChain(w).Then(scheduler.JobFunc(func(ctx context.Context) error {
					slot, ok := ormlock.Slot(ctx)
					ran(replica, slot, ok)
					return nil
				}))); err != nil {
					t.Fatal(err)
				}
				cr.Start()
				crons = append(crons, cr)
				time.Sleep(200 * time.Millisecond)
			}
			return func() {
				for _, cr := range crons {
					<-cr.Stop().Done()
				}
			}
		}
		testControls(t, c)
	})
}

// pausedLog is a cron.Logger that counts the skips JobWrapper logs whose
// reason wraps ormlock.ErrPaused.
type pausedLog struct {
	replica string
	seen    *pausedCount
}

func (p pausedLog) Info(msg string, kv ...any) {
	if msg == "ormlock: skipped" && strings.Contains(fmt.Sprint(kv...), ormlock.ErrPaused.Error()) {
		p.seen.add(p.replica)
	}
}

func (pausedLog) Error(error, string, ...any) {}

// Where a gocron Locker runs a slot an operator asked to rerun, by hand
// (Lock, the task, Unlock, as gocron calls them) on a fixed clock. A job
// with a Locker.Task: after the firing's own run, before Unlock returns,
// by the Task's function with ormlock.Slot(ctx) the rerun's slot (its
// error marks the slot failed and is reported). A job without one: never
// after the firing's own run (it stays 'rerun'), but in place of a firing
// whose own slot is taken, which Locker.Slot names.
func TestLockerReruns(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		admin := openMigrated(t, k)
		hourly := everyHour(t)
		ten := time.Date(2031, 5, 6, 10, 0, 0, 0, time.UTC)
		nine := ten.Add(-time.Hour)
		eight := ten.Add(-2 * time.Hour)
		at := func(d time.Duration) scheduler.Option {
			return scheduler.WithClock(func() time.Time { return ten.Add(d) })
		}
		var handled errs
		newLocker := func(owner string, d time.Duration) *scheduler.Locker {
			l, err := scheduler.NewLocker(gormsched.Backend(openGorm(t, k), ormlock.WithOwner(owner)), hourly, at(d), scheduler.WithErrorHandler(handled.handle))
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		rerun := func(job string, slots ...time.Time) {
			t.Helper()
			for _, slot := range slots {
				if err := gormlock.RunOnce(admin, job, slot, func(*gorm.DB) error { return errSettlement }, ormlock.WithClaim()); !errors.Is(err, errSettlement) {
					t.Fatalf("the failing run of %s: %v", slot.Format(time.RFC3339), err)
				}
				if _, err := gormlock.Act(admin, ormlock.Rerun(job, slot).By("bob", "again")); err != nil {
					t.Fatalf("Act(rerun %s): %v", slot.Format(time.RFC3339), err)
				}
			}
		}
		status := func(job string) map[time.Time]string {
			t.Helper()
			runs, err := gormlock.Runs(admin, job, 10)
			if err != nil {
				t.Fatal(err)
			}
			out := map[time.Time]string{}
			for _, r := range runs {
				out[r.Slot.UTC()] = r.Status
			}
			return out
		}

		// with a Task: the own slot, then both reruns (oldest first), the
		// second failing
		job := jobName(t) + ".task"
		rerun(job, eight, nine)
		a := newLocker("a", 100*time.Millisecond)
		var slots []time.Time
		task := a.Task(job, func(ctx context.Context) error {
			slot, _ := ormlock.Slot(ctx)
			slots = append(slots, slot)
			if !ormlock.Held(ctx) {
				return errors.New("not held")
			}
			if slot.Equal(nine) {
				return errSettlement
			}
			return nil
		})
		gctx, cancel := context.WithCancel(ctx) // gocron's job context
		defer cancel()
		l, err := a.Lock(gctx, job)
		if err != nil {
			t.Fatalf("Lock: %v", err)
		}
		if err := task(gctx); err != nil {
			t.Fatalf("the task: %v", err)
		}
		if err := l.Unlock(gctx); !errors.Is(err, errSettlement) {
			t.Errorf("Unlock: %v, want the rerun's error", err)
		}
		if want := []time.Time{ten, eight, nine}; fmt.Sprint(slots) != fmt.Sprint(want) {
			t.Errorf("the task's function ran for %v, want %v", slots, want)
		}
		if st := status(job); st[ten] != "done" || st[eight] != "done" || st[nine] != "failed" {
			t.Errorf("ledger after the firing: %v", st)
		}
		if got := handled.get(); len(got) != 1 || !errors.Is(got[0], errSettlement) {
			t.Errorf("error handler: %v, want the rerun's error", got)
		}

		// without a Task: not after the own run; in place of a firing
		// whose own slot is done
		job = jobName(t) + ".plain"
		rerun(job, nine)
		b, c := newLocker("b", 100*time.Millisecond), newLocker("c", 3*time.Second)
		l, err = b.Lock(ctx, job)
		if err != nil {
			t.Fatalf("b.Lock: %v", err)
		}
		if slot, ok := b.Slot(job); !ok || !slot.Equal(ten) {
			t.Errorf("b.Slot = %v, %v; want %s", slot, ok, ten.Format(time.RFC3339))
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("b.Unlock: %v", err)
		}
		if st := status(job); st[ten] != "done" || st[nine] != "rerun" {
			t.Errorf("ledger after b's firing: %v, want 10:00 done and 09:00 still rerun", st)
		}
		l, err = c.Lock(ctx, job)
		if err != nil {
			t.Fatalf("c.Lock (own slot done, a rerun pending): %v", err)
		}
		if slot, ok := c.Slot(job); !ok || !slot.Equal(nine) {
			t.Errorf("c.Slot = %v, %v; want the rerun's %s", slot, ok, nine.Format(time.RFC3339))
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("c.Unlock: %v", err)
		}
		if st := status(job); st[nine] != "done" {
			t.Errorf("ledger after c's firing: %v, want 09:00 done", st)
		}
		if _, err := c.Lock(ctx, job); !errors.Is(err, ormlock.ErrAlreadyDone) {
			t.Errorf("c.Lock again: %v, want ErrAlreadyDone", err)
		}
		if got := handled.get(); len(got) != 1 {
			t.Errorf("error handler: %v", got)
		}
	})
}

// A gocron Locker's catch-up (CatchUpLatest, at a job's first firing)
// after a resume does not run the slot that fell while the job was paused:
// the paused firing recorded it 'skipped', which catch-up counts as taken.
func TestLockerCatchUpAfterResume(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		admin := openMigrated(t, k)
		job := jobName(t)
		hourly, current := hourlyMidway(t)
		paused := current.Add(-time.Hour)
		var handled errs
		newLocker := func(owner string, clock func() time.Time, opts ...ormlock.Option) *scheduler.Locker {
			l, err := scheduler.NewLocker(gormsched.Backend(openGorm(t, k), append(opts, ormlock.WithOwner(owner))...), hourly,
				scheduler.WithClock(clock), scheduler.WithErrorHandler(handled.handle))
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		act := func(a ormlock.Action) {
			t.Helper()
			if _, err := gormlock.Act(admin, a.By("alice", "incident 42")); err != nil {
				t.Fatalf("Act(%s): %v", a.Kind, err)
			}
		}
		act(ormlock.Pause(job))
		late := newLocker("paused", func() time.Time { return paused.Add(100 * time.Millisecond) })
		if _, err := late.Lock(ctx, job); !errors.Is(err, ormlock.ErrPaused) {
			t.Fatalf("Lock of the paused job: %v, want ErrPaused", err)
		}
		act(ormlock.Resume(job))
		l, err := newLocker("a", time.Now).Lock(ctx, job)
		if err != nil {
			t.Fatalf("Lock after the resume: %v", err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// a replica started now: its first firing catches up the newest
		// missed slot of the window when its own is taken
		catchUp := newLocker("b", time.Now, ormlock.WithCatchUp(2*time.Hour, ormlock.CatchUpLatest))
		if _, err := catchUp.Lock(ctx, job); !errors.Is(err, ormlock.ErrAlreadyDone) {
			t.Fatalf("the catch-up's Lock: %v, want ErrAlreadyDone (the paused slot is not run)", err)
		}
		runs, err := gormlock.Runs(admin, job, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range runs {
			if r.Slot.Equal(paused) && (r.Status != "skipped" || !strings.Contains(r.Error, "paused by alice")) {
				t.Errorf("the paused slot: %q (%q), want skipped", r.Status, r.Error)
			}
		}
		if len(runs) != 2 {
			t.Errorf("ledger: %+v, want the paused slot skipped and the current one done", runs)
		}
		for _, err := range handled.get() {
			t.Errorf("error handler: %v", err)
		}
	})
}
