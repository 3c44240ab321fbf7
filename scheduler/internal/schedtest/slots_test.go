package schedtest_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/robfig/cron/v3"
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/entsched"
	"github.com/ormlock/ormlock/scheduler/gormsched"
	"github.com/ormlock/ormlock/scheduler/pgxsched"
	"github.com/ormlock/ormlock/scheduler/sqlsched"
)

// JobWrapper replicas of an hourly job (two on GORM, one on each other
// backend the server has), down for three slots, fire together at their
// first firing after start (their clocks a second apart):
// with CatchUpAll each missed slot runs once, with CatchUpLatest only the
// newest; the current slot runs once; the JobFunc reads each slot it runs
// with ormlock.Slot. The clocks are real (catch-up judges its window by the
// server's clock, and refuses clocks more than a minute from it).
func TestJobWrapperCatchUp(t *testing.T) {
	hourly, h := hourlyMidway(t)
	h = h.Add(-4 * time.Hour)
	hour := func(i int) time.Time { return h.Add(time.Duration(i) * time.Hour) }
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		client, _ := enttest.Open(t, k)
		for _, c := range []struct {
			policy ormlock.CatchUpPolicy
			want   []time.Time
		}{
			{ormlock.CatchUpAll, []time.Time{hour(1), hour(2), hour(3), hour(4)}},
			{ormlock.CatchUpLatest, []time.Time{hour(3), hour(4)}},
		} {
			t.Run(c.policy.String(), func(t *testing.T) {
				job := jobName(t)
				var mu sync.Mutex
				var ran []time.Time
				var handled errs
				var jobs []func()
				replicas := 4
				if k.Dialect() == "postgres" {
					replicas = 5
				}
				for i := range replicas {
					db := openGorm(t, k)
					if i == 0 {
						migrate(t, db)
						// the last run before the outage
						if err := gormlock.RunOnce(db, job, hour(0), func(*gorm.DB) error { return nil }); err != nil {
							t.Fatal(err)
						}
					}
					// the window reaches half an hour past the slot 4 h ago
					opts := []ormlock.Option{ormlock.WithOwner(fmt.Sprint("replica-", i)), ormlock.WithCatchUp(4*time.Hour, c.policy)}
					b := gormsched.Backend(db, opts...)
					switch i { // one replica on each other backend: the same slots, locks and rows
					case 2:
						b = entsched.Backend(client, opts...)
					case 3:
						b = sqlsched.Backend(testdb.Open(t, k), opts...)
					case 4:
						b = pgxsched.Backend(pgxPool(t, k), opts...)
					}
					w, err := scheduler.JobWrapper(b, job, hourly, scheduler.WithClock(skewed(time.Duration(i)*time.Second)), scheduler.WithErrorHandler(handled.handle))
					if err != nil {
						t.Fatal(err)
					}
					jobs = append(jobs, w(scheduler.JobFunc(func(ctx context.Context) error {
						s, ok := ormlock.Slot(ctx)
						if !ok {
							return errors.New("no slot in the job's context")
						}
						mu.Lock()
						defer mu.Unlock()
						ran = append(ran, s)
						return nil
					})).Run)
				}
				start := make(chan struct{})
				var wg sync.WaitGroup
				for _, run := range jobs {
					wg.Go(func() { <-start; run() })
				}
				close(start)
				wg.Wait()
				sort.Slice(ran, func(i, j int) bool { return ran[i].Before(ran[j]) })
				if fmt.Sprint(ran) != fmt.Sprint(c.want) {
					t.Errorf("ran %v, want each of %v once", ran, c.want)
				}
				if got := handled.get(); len(got) != 0 {
					t.Errorf("reported %v", got)
				}
			})
		}
	})
}

// The gocron Locker catches up the newest missed slot (CatchUpLatest) at a
// job's first firing after start, when the current slot has run already;
// the job reads that slot with Locker.Slot. Later firings run the current
// slot only. CatchUpAll is refused, and so is a WithPrune window shorter
// than the catch-up window plus a minute. The clock is real.
func TestLockerCatchUp(t *testing.T) {
	hourly, h := hourlyMidway(t)
	h = h.Add(-4 * time.Hour)
	hour := func(i int) time.Time { return h.Add(time.Duration(i) * time.Hour) }
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := openMigrated(t, k)
		job := jobName(t)
		for _, s := range []time.Time{hour(0), hour(4)} { // another replica ran 14:00
			if err := gormlock.RunOnce(db, job, s, func(*gorm.DB) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		b := gormsched.Backend(db, ormlock.WithCatchUp(6*time.Hour, ormlock.CatchUpLatest))
		if _, err := scheduler.NewLocker(gormsched.Backend(db, ormlock.WithCatchUp(time.Hour, ormlock.CatchUpAll)), hourly); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Fatalf("CatchUpAll in a Locker: %v", err)
		}
		if _, err := scheduler.NewLocker(b, hourly, scheduler.WithPrune(time.Hour)); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Fatalf("WithPrune shorter than the catch-up window: %v", err)
		}
		l, err := scheduler.NewLocker(b, hourly)
		if err != nil {
			t.Fatal(err)
		}
		lk, err := l.Lock(context.Background(), job)
		if err != nil {
			t.Fatal(err)
		}
		if s, ok := l.Slot(job); !ok || !s.Equal(hour(3)) {
			t.Errorf("first firing runs %v, want the newest missed slot %v", s, hour(3))
		}
		if err := lk.Unlock(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Lock(context.Background(), job); !errors.Is(err, ormlock.ErrAlreadyDone) {
			t.Fatalf("second firing: %v, want ErrAlreadyDone (no catch-up after the first)", err)
		}
		rs, err := gormlock.Runs(db, job, 10)
		if err != nil || len(rs) != 3 || !rs[1].Slot.Equal(hour(3)) || rs[1].Status != "done" {
			t.Fatalf("ledger: %+v, %v", rs, err)
		}
	})
}

// Interval jobs, whose firings each replica times from its own start
// (gocron.DurationJob, robfig/cron's "@every"): with the epoch-anchored
// schedule, replicas started at different times run each window at most
// once between them, and the windows they fired in all run.
func TestIntervalJobs(t *testing.T) {
	const period = 2 * time.Second
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		for _, kind := range []string{"gocron", "robfig"} {
			t.Run(kind, func(t *testing.T) {
				job := jobName(t)
				var tl tally
				var handled errs
				var stops []func()
				var mu sync.Mutex
				var fired []time.Time // every firing's reading of the clock
				clock := scheduler.WithClock(func() time.Time {
					now := time.Now()
					mu.Lock()
					defer mu.Unlock()
					fired = append(fired, now)
					return now
				})
				for i := range 3 {
					db := openGorm(t, k)
					if i == 0 {
						migrate(t, db)
					}
					replica := fmt.Sprintf("replica-%c", 'a'+i)
					b := gormsched.Backend(db, ormlock.WithOwner(replica))
					task := func() {
						tl.enter(replica)
						defer tl.exit()
						time.Sleep(50 * time.Millisecond)
					}
					if kind == "gocron" {
						every, err := ormlock.Every(period, nil)
						if err != nil {
							t.Fatal(err)
						}
						l, err := scheduler.NewLocker(b, every, clock, scheduler.WithErrorHandler(handled.handle))
						if err != nil {
							t.Fatal(err)
						}
						s, err := gocron.NewScheduler(gocron.WithDistributedLocker(l))
						if err != nil {
							t.Fatal(err)
						}
						if _, err := s.NewJob(gocron.DurationJob(period), gocron.NewTask(task), gocron.WithName(job)); err != nil {
							t.Fatal(err)
						}
						s.Start()
						stops = append(stops, func() { _ = s.Shutdown() })
					} else {
						spec := fmt.Sprintf("@every %v", period)
						every, err := ormlock.Cron(spec, nil)
						if err != nil {
							t.Fatal(err)
						}
						w, err := scheduler.JobWrapper(b, job, every, clock, scheduler.WithErrorHandler(handled.handle))
						if err != nil {
							t.Fatal(err)
						}
						c := cron.New()
						if _, err := c.AddJob(spec, cron.NewChain(w).Then(cron.FuncJob(task))); err != nil {
							t.Fatal(err)
						}
						c.Start()
						stops = append(stops, func() { <-c.Stop().Done() })
					}
					time.Sleep(700 * time.Millisecond) // replicas start at different phases
				}
				time.Sleep(5 * time.Second)
				for _, stop := range stops {
					stop()
				}
				// the windows fired in, and the ledger's runs: the same set
				every, _ := ormlock.Every(period, nil)
				windows := map[time.Time]bool{}
				mu.Lock()
				for _, f := range fired {
					windows[every.Slot(f)] = true
				}
				firings := len(fired)
				mu.Unlock()
				ledger, err := gormlock.Runs(openGorm(t, k), job, 100)
				if err != nil {
					t.Fatal(err)
				}
				runs, maxHold := tl.snapshot()
				t.Logf("%d firings in %d windows, %d runs", firings, len(windows), len(runs))
				if maxHold > 1 || len(runs) != len(windows) || len(ledger) != len(windows) {
					t.Errorf("%d runs (max %d at once), %d ledger rows; want one per window fired in (%d)", len(runs), maxHold, len(ledger), len(windows))
				}
				for _, r := range ledger {
					if !windows[r.Slot] || r.Status != "done" {
						t.Errorf("ledger run %+v: not a window fired in, or not done", r)
					}
				}
				for _, err := range handled.get() {
					t.Errorf("error handler: %v", err)
				}
			})
		}
	})
}
