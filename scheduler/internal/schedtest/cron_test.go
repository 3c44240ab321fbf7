package schedtest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/gormsched"
)

// Three robfig/cron instances, each with its own pool and a per-second
// schedule (cron.WithSeconds), started at different times and with skewed
// clocks: each second's run happens exactly once.
func TestJobWrapperRobfig(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		job := jobName(t)
		var tl tally
		var handled errs
		skews := []time.Duration{0, 250 * time.Millisecond, -200 * time.Millisecond}
		var crons []*cron.Cron
		var first time.Time
		for i, skew := range skews {
			db := openGorm(t, k)
			if i == 0 {
				migrate(t, db)
			}
			replica := fmt.Sprintf("replica-%c", 'a'+i)
			w, err := scheduler.JobWrapper(gormsched.Backend(db, ormlock.WithOwner(replica)), job, everySecond(t),
				scheduler.WithClock(skewed(skew)), scheduler.WithErrorHandler(handled.handle))
			if err != nil {
				t.Fatal(err)
			}
			c := cron.New(cron.WithSeconds())
			_, err = c.AddJob("* * * * * *", cron.NewChain(cron.Recover(cron.DiscardLogger), w).Then(scheduler.JobFunc(func(ctx context.Context) error {
				tl.enter(replica)
				defer tl.exit()
				select {
				case <-time.After(100 * time.Millisecond): // the work
				case <-ctx.Done():
					return ctx.Err()
				}
				return nil
			})))
			if err != nil {
				t.Fatal(err)
			}
			c.Start()
			if i == 0 {
				first = time.Now()
			}
			crons = append(crons, c)
			time.Sleep(300 * time.Millisecond)
		}
		time.Sleep(3500 * time.Millisecond)
		last := time.Now()
		for _, c := range crons {
			<-c.Stop().Done() // waits for running jobs
		}
		want := int(last.Truncate(time.Second).Sub(first.Truncate(time.Second)) / time.Second)
		checkLedger(t, openGorm(t, k), job, &tl, want)
		for _, err := range handled.get() {
			t.Errorf("error handler: %v", err)
		}
	})
}

// cronLog records what JobWrapper logs through a cron.Logger.
type cronLog struct {
	mu    sync.Mutex
	infos []string
	errs  []error
}

func (l *cronLog) Info(msg string, kv ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.infos = append(l.infos, fmt.Sprint(append([]any{msg}, kv...)...))
}

func (l *cronLog) Error(err error, msg string, kv ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

// A JobFunc's error marks the slot failed (a later trigger of the slot runs
// it again) and goes to the cron.Logger; skips are logged at Info; a plain
// cron.Job runs too; a panic marks the slot failed and goes on up the chain.
func TestJobWrapperOutcomes(t *testing.T) {
	k := testdb.MariaDB
	db := openMigrated(t, k)
	job := jobName(t)
	slot := time.Date(2031, 5, 6, 10, 0, 0, 0, time.UTC)
	var log cronLog
	w, err := scheduler.JobWrapper(gormsched.Backend(db, ormlock.WithOwner("w")), job, everySecond(t),
		scheduler.WithClock(func() time.Time { return slot }), scheduler.WithCronLogger(&log))
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	calls := 0
	w(scheduler.JobFunc(func(context.Context) error { calls++; return boom })).Run()
	runs, err := gormlock.Runs(db, job, 10)
	if err != nil || len(runs) != 1 || runs[0].Status != "failed" || runs[0].Error != "boom" {
		t.Fatalf("after a failed JobFunc: %+v, %v", runs, err)
	}
	if len(log.errs) != 1 || !errors.Is(log.errs[0], boom) {
		t.Fatalf("cron.Logger errors: %v", log.errs)
	}
	w(cron.FuncJob(func() { calls++ })).Run() // the retry, a plain cron.Job
	w(cron.FuncJob(func() { calls++ })).Run() // skipped: done
	if calls != 2 {
		t.Fatalf("the job ran %d times, want 2", calls)
	}
	if runs, _ := gormlock.Runs(db, job, 10); len(runs) != 1 || runs[0].Status != "done" {
		t.Fatalf("after the retry: %+v", runs)
	}
	if len(log.infos) != 1 || !strings.Contains(log.infos[0], "already done") {
		t.Fatalf("cron.Logger infos: %q", log.infos)
	}

	// a panic: recorded as failed, re-raised for cron.Recover
	slot = slot.Add(time.Hour)
	var recovered cronLog
	chain := cron.NewChain(cron.Recover(&recovered), w)
	chain.Then(cron.FuncJob(func() { panic("job exploded") })).Run()
	if len(recovered.errs) != 1 || !strings.Contains(recovered.errs[0].Error(), "job exploded") {
		t.Fatalf("cron.Recover got %v", recovered.errs)
	}
	runs, _ = gormlock.Runs(db, job, 10)
	if len(runs) != 2 || runs[0].Status != "failed" || !strings.Contains(runs[0].Error, "job exploded") {
		t.Fatalf("after a panic: %+v", runs)
	}
}
