package schedtest_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	"github.com/robfig/cron/v3"
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/gormsched"
)

// fixed returns a clock that reads t.
func fixed(t time.Time) func() time.Time { return func() time.Time { return t } }

// gocron's context ending while Lock claims the run (a shutdown, a removed
// job) is a skip: the error wraps ErrNotAcquired and the context's cause,
// and the error handler sees nothing, wherever the cancellation lands.
func TestLockerCancelledWhileLocking(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := openGorm(t, k)
		migrate(t, db)
		job := jobName(t)
		hourly, err := ormlock.Every(time.Hour, nil)
		if err != nil {
			t.Fatal(err)
		}
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
