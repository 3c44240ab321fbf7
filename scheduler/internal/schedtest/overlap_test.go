package schedtest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/entsched"
	"github.com/ormlock/ormlock/scheduler/gormsched"
)

// WithExclusive: a run of the next slot, on another replica, while the
// previous slot's run is still going on, is refused (wait 0) or waits for it
// (wait > 0). Without it the two slots run at once.
func TestLockerExclusive(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		minutely, err := ormlock.Cron("* * * * *", nil)
		if err != nil {
			t.Fatal(err)
		}
		at := time.Date(2032, 2, 2, 10, 0, 0, 0, time.UTC)
		newLocker := func(now time.Time, opts ...scheduler.Option) *scheduler.Locker {
			db := openMigrated(t, k)
			l, err := scheduler.NewLocker(gormsched.Backend(db), minutely, append(opts, scheduler.WithClock(fixed(now)))...)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}

		// default: slot-level only, the next slot runs alongside
		job := jobName(t)
		a := newLocker(at)
		held, err := a.Lock(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		next, err := newLocker(at.Add(time.Minute)).Lock(ctx, job)
		if err != nil {
			t.Fatalf("default: the next slot while the previous runs: %v, want it to run", err)
		}
		_ = next.Unlock(ctx)
		_ = held.Unlock(ctx)

		// WithExclusive(0): refused at once
		job = jobName(t)
		a = newLocker(at, scheduler.WithExclusive(0))
		held, err = a.Lock(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		b := newLocker(at.Add(time.Minute), scheduler.WithExclusive(0))
		if _, err := b.Lock(ctx, job); !errors.Is(err, ormlock.ErrNotAcquired) {
			t.Fatalf("exclusive: the next slot while the previous runs: %v, want ErrNotAcquired", err)
		}
		if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// the skipped slot left no row: a later firing of it runs
		if h, err := b.Lock(ctx, job); err != nil {
			t.Fatalf("exclusive: the next slot after the run: %v", err)
		} else if err := h.Unlock(ctx); err != nil {
			t.Fatal(err)
		}

		// WithExclusive(wait): waits for the run in progress to end
		job = jobName(t)
		a = newLocker(at, scheduler.WithExclusive(10*time.Second))
		held, err = a.Lock(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(300*time.Millisecond, func() { _ = held.Unlock(ctx) })
		start := time.Now()
		h, err := newLocker(at.Add(time.Minute), scheduler.WithExclusive(10*time.Second)).Lock(ctx, job)
		if err != nil {
			t.Fatalf("exclusive with a wait: %v", err)
		}
		if waited := time.Since(start); waited < 250*time.Millisecond {
			t.Errorf("exclusive with a wait: ran after %v, before the previous run ended", waited)
		}
		if err := h.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		rs, err := gormlock.Runs(openGorm(t, k), job, 10)
		if err != nil || len(rs) != 2 {
			t.Fatalf("ledger: %+v, %v; want two runs", rs, err)
		}
	})
}

// WithExclusive through real robfig/cron schedulers: a job that takes
// longer than its period never runs twice at once across three replicas.
func TestJobWrapperExclusiveRobfig(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		job := jobName(t)
		var tl tally
		var handled errs
		var crons []*cron.Cron
		for i := range 3 {
			db := openGorm(t, k)
			if i == 0 {
				migrate(t, db)
			}
			w, err := scheduler.JobWrapper(gormsched.Backend(db), job, everySecond(t), scheduler.WithExclusive(0), scheduler.WithErrorHandler(handled.handle))
			if err != nil {
				t.Fatal(err)
			}
			c := cron.New(cron.WithSeconds())
			if _, err := c.AddJob("* * * * * *", cron.NewChain(w).Then(cron.FuncJob(func() {
				tl.enter("r")
				defer tl.exit()
				time.Sleep(1500 * time.Millisecond) // longer than the period
			}))); err != nil {
				t.Fatal(err)
			}
			c.Start()
			crons = append(crons, c)
			time.Sleep(150 * time.Millisecond)
		}
		time.Sleep(4 * time.Second)
		for _, c := range crons {
			<-c.Stop().Done()
		}
		runs, maxHold := tl.snapshot()
		if maxHold != 1 || len(runs) < 2 {
			t.Fatalf("%d runs, at most %d at once; want runs, one at a time", len(runs), maxHold)
		}
		for _, err := range handled.get() {
			t.Errorf("error handler: %v", err)
		}
	})
}

// WithPrune: after a run, the adapter deletes the finished rows older than
// the given age from its ledger table, and keeps the others.
func TestLockerPrune(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		db := openGorm(t, k)
		tbl := "sched_prune_" + string(k)
		t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + tbl) })
		opt := ormlock.WithLedgerTable(tbl)
		if err := gormlock.Migrate(db, opt); err != nil {
			t.Fatal(err)
		}
		job := jobName(t)
		for i := range 3 { // three old runs
			slot := time.Now().Add(-time.Duration(48+i) * time.Hour).Truncate(time.Hour)
			if err := gormlock.RunOnce(db, job, slot, func(*gorm.DB) error { return nil }, opt); err != nil {
				t.Fatal(err)
			}
		}
		var handled errs
		hourly := everyHour(t)
		l, err := scheduler.NewLocker(gormsched.Backend(db, opt), hourly, scheduler.WithPrune(24*time.Hour), scheduler.WithErrorHandler(handled.handle))
		if err != nil {
			t.Fatal(err)
		}
		held, err := l.Lock(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		rs, err := gormlock.Runs(db, job, 10, opt)
		if err != nil || len(rs) != 1 {
			t.Fatalf("ledger after a run with WithPrune: %+v, %v; want the new run only", rs, err)
		}
		for _, err := range handled.get() {
			t.Errorf("error handler: %v", err)
		}
	})
}

// WithPrune on the robfig/cron wrapper over an ent Backend.
func TestJobWrapperPruneEnt(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		client, _ := enttest.Open(t, k)
		tbl := "sched_prune_ent_" + string(k)
		t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + tbl) })
		opt := ormlock.WithLedgerTable(tbl)
		if err := entlock.Migrate(ctx, client, opt); err != nil {
			t.Fatal(err)
		}
		job := jobName(t)
		for i := range 3 { // three old runs
			slot := time.Now().Add(-time.Duration(48+i) * time.Hour).Truncate(time.Hour)
			if err := entlock.RunOnce(ctx, client, job, slot, func(*ent.Tx) error { return nil }, opt); err != nil {
				t.Fatal(err)
			}
		}
		var handled errs
		hourly := everyHour(t)
		w, err := scheduler.JobWrapper(entsched.Backend(client, opt), job, hourly, scheduler.WithPrune(24*time.Hour), scheduler.WithErrorHandler(handled.handle))
		if err != nil {
			t.Fatal(err)
		}
		ran := 0
		w(cron.FuncJob(func() { ran++ })).Run()
		rs, err := entlock.Runs(ctx, client, job, 10, opt)
		if err != nil || ran != 1 || len(rs) != 1 {
			t.Fatalf("ran %d; ledger after a run with WithPrune: %+v, %v; want the new run only", ran, rs, err)
		}
		for _, err := range handled.get() {
			t.Errorf("error handler: %v", err)
		}
	})
}
