package schedtest_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/robfig/cron/v3"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/gormsched"
)

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
