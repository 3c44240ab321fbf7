package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
	_ "time/tzdata" // zone data for Europe/Berlin

	"github.com/go-co-op/gocron/v2"
	"github.com/jonboulle/clockwork"
	"github.com/robfig/cron/v3"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/scheduler"
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

// The case that lost most runs when ormlock's cron dialect differed from
// gocron's: "0 0 */2 * 1" (robfig/cron: odd days OR Mondays) through three
// real gocron schedulers with the Locker, on a fake clock over four weeks
// in Europe/Berlin. Every firing runs exactly once.
func TestLockerGocronCronDialect(t *testing.T) {
	const expr = "0 0 */2 * 1"
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		job := jobName(t)
		sched, err := ormlock.Cron(expr, berlin)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Date(2031, 5, 3, 12, 0, 0, 0, berlin)
		fc := clockwork.NewFakeClockAt(start)
		var tl tally
		var handled errs
		var scheds []gocron.Scheduler
		counter := &lockCounts{n: map[string]int{}}
		for i := range 3 {
			db := openGorm(t, k)
			if i == 0 {
				migrate(t, db)
			}
			replica := fmt.Sprintf("replica-%c", 'a'+i)
			l, err := scheduler.NewLocker(scheduler.GORM(db, ormlock.WithOwner(replica)), sched,
				scheduler.WithClock(fc.Now), scheduler.WithErrorHandler(handled.handle))
			if err != nil {
				t.Fatal(err)
			}
			s, err := gocron.NewScheduler(gocron.WithClock(fc), gocron.WithLocation(berlin), gocron.WithDistributedLocker(countingLocker{l, counter}))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.NewJob(gocron.CronJob(expr, false), gocron.NewTask(func() {
				tl.enter(replica)
				defer tl.exit()
			}), gocron.WithName(job)); err != nil {
				t.Fatal(err)
			}
			s.Start()
			scheds = append(scheds, s)
		}
		rs, err := cron.ParseStandard("CRON_TZ=Europe/Berlin " + expr)
		if err != nil {
			t.Fatal(err)
		}
		end := start.AddDate(0, 0, 28)
		firings := 0
		for f := rs.Next(start); f.Before(end); f = rs.Next(f) {
			firings++
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			if err := fc.BlockUntilContext(wctx, 3); err != nil { // each scheduler armed its timer
				cancel()
				t.Fatalf("firing %d: the schedulers did not arm their timers: %v", firings, err)
			}
			cancel()
			fc.Advance(f.Sub(fc.Now()) + 20*time.Millisecond) // timers fire a little late
			deadline := time.Now().Add(30 * time.Second)
			for counter.get("run")+counter.get("skip")+counter.get("error") < 3*firings || counter.get("unlocked") < counter.get("run") {
				if time.Now().After(deadline) {
					t.Fatalf("firing %d at %s: gocron did not finish (%v)", firings, f, counter.get("run"))
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
		t.Logf("%s over 4 weeks: %d firings, %d runs, %d skips, %d errors", expr, firings, len(runs), counter.get("skip"), counter.get("error"))
		if len(runs) != firings || counter.get("run") != firings || maxHold > 1 {
			t.Errorf("%d firings, %d runs (max %d at once); want each firing run once", firings, len(runs), maxHold)
		}
		if firings < 14 {
			t.Errorf("only %d firings of %q in four weeks", firings, expr)
		}
		for _, err := range handled.get() {
			t.Errorf("error handler: %v", err)
		}
	})
}
