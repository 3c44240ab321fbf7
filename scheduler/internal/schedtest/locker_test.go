package schedtest_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	"github.com/robfig/cron/v3"
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/leakcheck"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/gormsched"
)

// errs collects what the adapters hand to their error handler.
type errs struct {
	mu  sync.Mutex
	all []error
}

func (e *errs) handle(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, err)
}

func (e *errs) get() []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]error(nil), e.all...)
}

// Three gocron schedulers, each with its own pool, run a job every second;
// their start times differ, one clock runs 250 ms ahead and one 200 ms
// behind. Each second's run happens exactly once.
func TestLockerGocron(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		job := jobName(t)
		var tl tally
		var handled errs
		skews := []time.Duration{0, 250 * time.Millisecond, -200 * time.Millisecond}
		var scheds []gocron.Scheduler
		var first time.Time
		for i, skew := range skews {
			db := openGorm(t, k)
			if i == 0 {
				migrate(t, db)
			}
			replica := fmt.Sprintf("replica-%c", 'a'+i)
			locker, err := scheduler.NewLocker(gormsched.Backend(db, ormlock.WithOwner(replica)), everySecond(t),
				scheduler.WithClock(skewed(skew)), scheduler.WithErrorHandler(handled.handle))
			if err != nil {
				t.Fatal(err)
			}
			s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
			if err != nil {
				t.Fatal(err)
			}
			_, err = s.NewJob(gocron.CronJob("* * * * * *", true), gocron.NewTask(func() {
				tl.enter(replica)
				defer tl.exit()
				time.Sleep(100 * time.Millisecond) // the work
			}), gocron.WithName(job))
			if err != nil {
				t.Fatal(err)
			}
			s.Start()
			if i == 0 {
				first = time.Now()
			}
			scheds = append(scheds, s)
			time.Sleep(300 * time.Millisecond) // staggered start-ups
		}
		time.Sleep(3500 * time.Millisecond)
		last := time.Now()
		for _, s := range scheds {
			if err := s.Shutdown(); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
		}
		// seconds that began while the first scheduler ran
		want := int(last.Truncate(time.Second).Sub(first.Truncate(time.Second)) / time.Second)
		checkLedger(t, openGorm(t, k), job, &tl, want)
		for _, err := range handled.get() {
			t.Errorf("error handler: %v", err)
		}
	})
}

// The late instance: while one replica runs the slot another is refused
// (ErrNotAcquired); after it, a replica whose trigger comes late — or early,
// by a skewed clock — finds the slot done. A mutex on the job name would
// have let it run again. The job's context ending does not end the hold,
// and Unlock ignores its (cancelled) context.
func TestLockerLateInstance(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		job := jobName(t)
		hourly, err := ormlock.Every(time.Hour, time.UTC)
		if err != nil {
			t.Fatal(err)
		}
		at := func(s string) func() time.Time {
			v, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				t.Fatal(err)
			}
			return func() time.Time { return v }
		}
		var handled errs
		newLocker := func(owner, now string) *scheduler.Locker {
			db := openMigrated(t, k)
			l, err := scheduler.NewLocker(gormsched.Backend(db, ormlock.WithOwner(owner)), hourly,
				scheduler.WithClock(at(now)), scheduler.WithErrorHandler(handled.handle))
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		a := newLocker("a", "2031-05-06T10:00:00.1Z")
		late := newLocker("late", "2031-05-06T10:00:03Z")
		early := newLocker("early", "2031-05-06T09:59:58Z") // within SlotTolerance of 10:00

		jobCtx, cancelJob := context.WithCancel(ctx)
		held, err := a.Lock(jobCtx, job)
		if err != nil {
			t.Fatalf("a.Lock: %v", err)
		}
		for _, l := range []*scheduler.Locker{late, early} {
			if _, err := l.Lock(ctx, job); !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Fatalf("Lock while a runs the slot: %v, want ErrNotAcquired", err)
			}
		}
		cancelJob() // gocron shutting down while the job runs
		time.Sleep(100 * time.Millisecond)
		if _, err := late.Lock(ctx, job); !errors.Is(err, ormlock.ErrNotAcquired) {
			t.Fatalf("Lock after a's context ended, while a still runs: %v, want ErrNotAcquired", err)
		}
		if err := held.Unlock(jobCtx); err != nil {
			t.Fatalf("Unlock with the job's cancelled context: %v", err)
		}
		if err := held.Unlock(jobCtx); err != nil {
			t.Fatalf("second Unlock: %v", err)
		}
		for _, l := range []*scheduler.Locker{late, early, a} {
			if _, err := l.Lock(ctx, job); !errors.Is(err, ormlock.ErrAlreadyDone) {
				t.Fatalf("Lock after the run: %v, want ErrAlreadyDone", err)
			}
		}
		runs, err := gormlock.Runs(openGorm(t, k), job, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) != 1 || runs[0].Owner != "a" || runs[0].Status != "done" ||
			!runs[0].Slot.Equal(time.Date(2031, 5, 6, 10, 0, 0, 0, time.UTC)) {
			t.Fatalf("ledger: %+v", runs)
		}

		// A context that ended before the attempt: no run, no row.
		done, cancel := context.WithCancel(ctx)
		cancel()
		other := newLocker("a", "2031-05-06T11:00:00Z")
		if _, err := other.Lock(done, job); !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Fatalf("Lock on a cancelled context: %v, want ErrNotAcquired and context.Canceled", err)
		}
		if runs, _ := gormlock.Runs(openGorm(t, k), job, 10); len(runs) != 1 {
			t.Fatalf("a cancelled attempt left a row: %+v", runs)
		}
		for _, err := range handled.get() {
			if strings.Contains(err.Error(), "fired 3 times within its slot") {
				continue // late fired thrice in one slot here: rightly reported
			}
			t.Errorf("error handler got a skip or an error: %v", err)
		}
	})
}

// A lock lost while the job runs (its connection killed) is reported at
// Unlock, to the caller and to the error handler, wrapping ErrLockLost.
func TestLockerLockLost(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		job := jobName(t)
		db := openMigrated(t, k)
		var handled errs
		now := time.Date(2031, 5, 6, 10, 0, 0, 0, time.UTC)
		l, err := scheduler.NewLocker(gormsched.Backend(db, ormlock.WithKeepalive(100*time.Millisecond)), everySecond(t),
			scheduler.WithClock(func() time.Time { return now }), scheduler.WithErrorHandler(handled.handle))
		if err != nil {
			t.Fatal(err)
		}
		held, err := l.Lock(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		h, err := gormlock.Holder(db, ormlock.RunKey(job, now))
		if err != nil || !h.Held {
			t.Fatalf("Holder: %+v, %v", h, err)
		}
		testdb.Kill(t, k, h.PID)
		time.Sleep(500 * time.Millisecond) // a few keepalive intervals
		err = held.Unlock(ctx)
		if !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("Unlock after the lock connection was killed: %v, want ErrLockLost", err)
		}
		if got := handled.get(); len(got) != 1 || !errors.Is(got[0], ormlock.ErrLockLost) {
			t.Fatalf("error handler got %v", got)
		}
		t.Logf("Unlock: %v", err)
	})
}

// A run that cannot start for another reason than a skip is reported.
func TestLockerMissingLedger(t *testing.T) {
	db := openGorm(t, testdb.Postgres)
	var handled errs
	l, err := scheduler.NewLocker(gormsched.Backend(db, ormlock.WithLedgerTable("no_such_ledger")), everySecond(t),
		scheduler.WithErrorHandler(handled.handle))
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Lock(context.Background(), jobName(t))
	if err == nil || !strings.Contains(err.Error(), "Migrate") {
		t.Fatalf("Lock without a ledger table: %v", err)
	}
	if got := handled.get(); len(got) != 1 {
		t.Fatalf("error handler got %v", got)
	}
}

func TestNewLockerBadInput(t *testing.T) {
	s, _ := ormlock.Every(time.Minute, nil)
	db := &gorm.DB{}
	cases := map[string]func() error{
		"zero Backend": func() error { _, err := scheduler.NewLocker(scheduler.Backend{}, s); return err },
		"nil db":       func() error { _, err := scheduler.NewLocker(gormsched.Backend(nil), s); return err },
		"nil schedule": func() error { _, err := scheduler.NewLocker(gormsched.Backend(db), nil); return err },
		"bad lock option": func() error {
			_, err := scheduler.NewLocker(gormsched.Backend(db, ormlock.WithLedgerTable("x; drop")), s)
			return err
		},
		"nil job schedule": func() error {
			_, err := scheduler.NewLocker(gormsched.Backend(db), s, scheduler.WithJobSchedule("j", nil))
			return err
		},
		"empty job name": func() error {
			_, err := scheduler.NewLocker(gormsched.Backend(db), s, scheduler.WithJobSchedule("", s))
			return err
		},
		"nil clock": func() error {
			_, err := scheduler.NewLocker(gormsched.Backend(db), s, scheduler.WithClock(nil))
			return err
		},
		"nil handler": func() error {
			_, err := scheduler.NewLocker(gormsched.Backend(db), s, scheduler.WithErrorHandler(nil))
			return err
		},
		"zero retry": func() error {
			_, err := scheduler.NewElector(gormsched.Backend(db), "leader", scheduler.WithRetry(0))
			return err
		},
		"empty leader key": func() error { _, err := scheduler.NewElector(gormsched.Backend(db), ""); return err },
		"empty wrapped job": func() error {
			_, err := scheduler.JobWrapper(gormsched.Backend(db), "", s)
			return err
		},
		"nil wrapper schedule": func() error {
			_, err := scheduler.JobWrapper(gormsched.Backend(db), "j", nil)
			return err
		},
		"nil cron logger": func() error {
			_, err := scheduler.JobWrapper(gormsched.Backend(db), "j", s, scheduler.WithCronLogger(nil))
			return err
		},
	}
	for name, f := range cases {
		err := f()
		if !errors.Is(err, ormlock.ErrInvalidArgument) && !errors.Is(err, ormlock.ErrInvalidKey) {
			t.Errorf("%s: %v, want ErrInvalidArgument or ErrInvalidKey", name, err)
			continue
		}
		if !strings.HasPrefix(err.Error(), "ormlock: ") {
			t.Errorf("%s: error text %q lacks the ormlock: prefix", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
}

// What Unlock relies on in the library: RunOnce in claim mode records the
// end of the run and releases the lock even when the caller's context was
// cancelled while the job ran (the release and the ledger update run
// detached from it). AssertNoLeaks (in openGorm) checks the release.
func TestClaimReleaseIgnoresCancellation(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := openMigrated(t, k)
		job := jobName(t)
		slot := time.Date(2031, 5, 6, 10, 0, 0, 0, time.UTC)
		ctx, cancel := context.WithCancel(context.Background())
		err := gormlock.RunOnce(db.WithContext(ctx), job, slot, func(*gorm.DB) error {
			cancel() // the scheduler shuts down while the job runs
			return nil
		}, ormlock.WithClaim())
		if err != nil {
			t.Fatalf("RunOnce: %v", err)
		}
		runs, err := gormlock.Runs(db, job, 10)
		if err != nil || len(runs) != 1 || runs[0].Status != "done" {
			t.Fatalf("ledger after a cancelled run: %+v, %v", runs, err)
		}
	})
}

// fixed returns a clock that reads t.
func fixed(t time.Time) func() time.Time { return func() time.Time { return t } }

// gocron's context ending while Lock claims the run (a shutdown, a removed
// job) is a skip: the error wraps ErrNotAcquired and the context's cause,
// and the error handler sees nothing, wherever the cancellation lands.
func TestLockerCancelledWhileLocking(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := openMigrated(t, k)
		job := jobName(t)
		hourly := everyHour(t)
		var handled errs
		r := rand.New(rand.NewPCG(3, uint64(len(k))))
		var ran, skippedN int
		for i := range 40 {
			slot := time.Date(2032, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Hour)
			l, err := scheduler.NewLocker(gormsched.Backend(db), hourly, scheduler.WithClock(fixed(slot)), scheduler.WithErrorHandler(handled.handle))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancelCause(context.Background())
			cause := errors.New("scheduler shut down")
			time.AfterFunc(time.Duration(r.Int64N(int64(15*time.Millisecond))), func() { cancel(cause) })
			held, err := l.Lock(ctx, job)
			switch {
			case err == nil:
				ran++
				if err := held.Unlock(ctx); err != nil {
					t.Fatalf("Unlock: %v", err)
				}
			case errors.Is(err, ormlock.ErrNotAcquired) && errors.Is(err, cause):
				skippedN++
			default:
				t.Fatalf("Lock cancelled mid-way: %v, want ErrNotAcquired wrapping the cause", err)
			}
			cancel(nil)
		}
		t.Logf("%d runs, %d cancelled claims", ran, skippedN)
		for _, err := range handled.get() {
			t.Errorf("error handler got %v", err)
		}
	})
}

// An adapter built with a bad option fails closed even when the caller
// ignores the constructor's error: real gocron and robfig/cron schedulers
// never run the job, and nil or zero values refuse too.
func TestFailClosed(t *testing.T) {
	db := openGorm(t, testdb.Postgres)
	migrate(t, db)
	every, _ := ormlock.Every(time.Second, nil)
	var handled errs
	var runs atomic.Int32
	bad := scheduler.WithRetry(-time.Second) // rejected; ignored by the caller below

	locker, _ := scheduler.NewLocker(gormsched.Backend(db), every, bad, scheduler.WithErrorHandler(handled.handle))
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewJob(gocron.CronJob("* * * * * *", true), gocron.NewTask(func() { runs.Add(1) }), gocron.WithName(jobName(t))); err != nil {
		t.Fatal(err)
	}
	w, _ := scheduler.JobWrapper(gormsched.Backend(db), jobName(t), every, bad, scheduler.WithErrorHandler(handled.handle))
	c := cron.New(cron.WithSeconds())
	if _, err := c.AddJob("* * * * * *", cron.NewChain(w).Then(cron.FuncJob(func() { runs.Add(1) }))); err != nil {
		t.Fatal(err)
	}
	elector, _ := scheduler.NewElector(gormsched.Backend(db), "", bad)
	s.Start()
	c.Start()
	time.Sleep(2500 * time.Millisecond)
	_ = s.Shutdown()
	<-c.Stop().Done()
	if n := runs.Load(); n != 0 {
		t.Fatalf("the job ran %d times through adapters whose constructor failed", n)
	}
	got := handled.get()
	if len(got) < 2 {
		t.Fatalf("error handler got %v, want the constructor's error at each firing", got)
	}
	for _, err := range got {
		if !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Errorf("error handler: %v, want the constructor's ErrInvalidArgument", err)
		}
	}
	if err := elector.IsLeader(context.Background()); !errors.Is(err, ormlock.ErrInvalidKey) {
		t.Errorf("failed Elector: IsLeader = %v", err)
	}
	if err := elector.Close(); err != nil {
		t.Errorf("failed Elector: Close = %v", err)
	}

	var nilLocker *scheduler.Locker
	for name, l := range map[string]*scheduler.Locker{"nil": nilLocker, "zero": {}} {
		if _, err := l.Lock(context.Background(), "j"); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Errorf("%s Locker: Lock = %v, want ErrInvalidArgument", name, err)
		}
	}
	var zero scheduler.Elector
	if err := zero.IsLeader(context.Background()); err == nil {
		t.Error("zero Elector leads")
	}
	if err := zero.Close(); err != nil {
		t.Errorf("zero Elector: Close = %v", err)
	}
	var nilElector *scheduler.Elector
	if err := nilElector.IsLeader(context.Background()); err == nil {
		t.Error("nil Elector leads")
	}
}

// Real gocron schedulers shut down just as their per-second job fires: the
// claims cut short are skips, and nothing reaches the error handler.
func TestLockerGocronShutdownWhileLocking(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		job := jobName(t)
		var handled errs
		var lockErrs errs // what gocron's AfterLockError saw
		dbs := make([]*gorm.DB, 3)
		for i := range dbs {
			dbs[i] = openGorm(t, k)
		}
		migrate(t, dbs[0])
		r := rand.New(rand.NewPCG(5, uint64(len(k))))
		for range 6 {
			var scheds []gocron.Scheduler
			for _, db := range dbs {
				l, err := scheduler.NewLocker(gormsched.Backend(db), everySecond(t), scheduler.WithErrorHandler(handled.handle))
				if err != nil {
					t.Fatal(err)
				}
				s, err := gocron.NewScheduler(gocron.WithDistributedLocker(l))
				if err != nil {
					t.Fatal(err)
				}
				_, err = s.NewJob(gocron.CronJob("* * * * * *", true), gocron.NewTask(func() {}), gocron.WithName(job),
					gocron.WithEventListeners(gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) { lockErrs.handle(err) })))
				if err != nil {
					t.Fatal(err)
				}
				s.Start()
				scheds = append(scheds, s)
			}
			// just after the next second begins, while the claims run
			now := time.Now()
			time.Sleep(now.Truncate(time.Second).Add(time.Second).Sub(now) + time.Duration(r.Int64N(int64(8*time.Millisecond))))
			var wg sync.WaitGroup
			for _, s := range scheds {
				wg.Go(func() { _ = s.Shutdown() })
			}
			wg.Wait()
		}
		for _, err := range handled.get() {
			t.Errorf("error handler got %v", err)
		}
		for _, err := range lockErrs.get() {
			if !errors.Is(err, ormlock.ErrNotAcquired) && !errors.Is(err, ormlock.ErrAlreadyDone) {
				t.Errorf("gocron's AfterLockError got %v, not a skip", err)
			}
		}
		t.Logf("%d skips seen by gocron", len(lockErrs.get()))
	})
}

// A Lock whose context has already ended is a skip that sends nothing: the
// next Lock of the same slot on the same replica, at once, claims it (a
// cancelled Lock behind PgBouncer used to leave the slot's lock held for a
// moment, and the next Lock was refused as held by another holder).
func TestLockerCancelledContextThenLive(t *testing.T) {
	leakcheck.Goroutines(t)
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := openMigrated(t, k)
		job := jobName(t)
		hourly := everyHour(t)
		for i := range 20 {
			slot := time.Date(2033, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Hour)
			l, err := scheduler.NewLocker(gormsched.Backend(db), hourly, scheduler.WithClock(fixed(slot)))
			if err != nil {
				t.Fatal(err)
			}
			ended, cancel := context.WithCancel(context.Background())
			cancel()
			if _, err := l.Lock(ended, job); !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
				t.Fatalf("round %d: Lock on a cancelled context: %v, want ErrNotAcquired and context.Canceled", i, err)
			}
			held, err := l.Lock(context.Background(), job)
			if err != nil {
				t.Fatalf("round %d: Lock right after a cancelled Lock: %v", i, err)
			}
			if err := held.Unlock(context.Background()); err != nil {
				t.Fatalf("round %d: Unlock: %v", i, err)
			}
		}
	})
}

// A Lock whose context ends mid-way, wherever the cancellation lands,
// leaves no lock held once it returns: the next Lock of the same slot on
// the same replica, at once, claims it (or finds it done, when the
// cancelled Lock had claimed it and its run was unlocked).
func TestLockerCancelledMidwayThenLive(t *testing.T) {
	leakcheck.Goroutines(t)
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := openMigrated(t, k)
		job := jobName(t)
		hourly := everyHour(t)
		r := rand.New(rand.NewPCG(5, uint64(len(k))))
		var skips int
		for i := range 40 {
			slot := time.Date(2034, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Hour)
			l, err := scheduler.NewLocker(gormsched.Backend(db), hourly, scheduler.WithClock(fixed(slot)))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(time.Duration(r.Int64N(int64(4*time.Millisecond))), cancel)
			held, err := l.Lock(ctx, job)
			cancel()
			switch {
			case err == nil:
				if err := held.Unlock(ctx); err != nil {
					t.Fatalf("round %d: Unlock: %v", i, err)
				}
			case errors.Is(err, ormlock.ErrNotAcquired) && errors.Is(err, context.Canceled):
				skips++
			default:
				t.Fatalf("round %d: Lock cancelled mid-way: %v", i, err)
			}
			held, err = l.Lock(context.Background(), job)
			switch {
			case err == nil:
				if err := held.Unlock(context.Background()); err != nil {
					t.Fatalf("round %d: Unlock: %v", i, err)
				}
			case errors.Is(err, ormlock.ErrAlreadyDone):
			default:
				t.Fatalf("round %d: Lock right after a Lock cancelled mid-way: %v", i, err)
			}
		}
		t.Logf("%d of 40 Locks cancelled before the claim", skips)
	})
}
