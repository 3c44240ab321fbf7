package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/schedhook"
)

// TestJobControls: the jobs' actions (docs/OPERATIONS.md) on every adapter
// and every server, one ledger per case: a paused job's slots are recorded
// 'skipped' and its RunOnce (both modes) and RunScheduled return
// ErrPaused without calling fn; a resume under CatchUpAll runs none of
// them; a skipped slot is refused as ErrAlreadyDone; a failed slot asked
// to rerun runs once across two concurrent RunScheduled; bad input changes
// nothing; every action is in the log with its author.
func TestJobControls(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		tbl := ledgerTable(t, k, r)
		ac := r.(actor)
		ctx := context.Background()
		opt := ormlock.WithLedgerTable(tbl)
		job := fmt.Sprintf("ctl-%s-%s-%d", a.name, k, time.Now().UnixNano())
		act := func(x ormlock.Action) ormlock.ActionRecord {
			t.Helper()
			rec, err := ac.Act(ctx, x, opt)
			if err != nil {
				t.Fatalf("Act(%s): %v", x.Kind, err)
			}
			return rec
		}
		// fn counts its calls; which slots ran, the ledger says (entlock's
		// fn gets no slot in its context)
		var calls atomic.Int64
		fn := func(txn) error { calls.Add(1); return nil }
		every, err := ormlock.Every(time.Minute, time.UTC)
		if err != nil {
			t.Fatal(err)
		}
		// the firings of the last minutes (whole minutes, UTC)
		now := time.Now().UTC().Truncate(time.Minute)
		at := func(m int) time.Time { return now.Add(time.Duration(m) * time.Minute) }
		firing := func(m int, opts ...ormlock.Option) error {
			return r.RunScheduled(ctx, job, every, fn, append([]ormlock.Option{opt, schedhook.Now(at(m))}, opts...)...)
		}
		// a firing before any action records the schedule
		if err := firing(-9); err != nil {
			t.Fatalf("first firing: %v", err)
		}

		t.Run("pause", func(t *testing.T) {
			if rec := act(ormlock.Pause(job).By("alice", "incident 42")); rec.Outcome != "paused" || rec.Author != "alice" || rec.ID == 0 || rec.At.IsZero() {
				t.Errorf("pause: %+v", rec)
			}
			if rec := act(ormlock.Pause(job).By("bob", "")); !strings.HasPrefix(rec.Outcome, "already paused") {
				t.Errorf("second pause: %+v", rec)
			}
			var events atomic.Int64
			obs := ormlock.WithObserver(ormlock.ObserverFunc(func(_ context.Context, e ormlock.Event) {
				if e.Kind == ormlock.EventAlreadyDone && errors.Is(e.Err, ormlock.ErrPaused) && e.Job == job {
					events.Add(1)
				}
			}))
			before := calls.Load()
			for i, call := range []func() error{
				func() error { return r.RunOnce(ctx, job, at(-3), fn, opt, obs) },
				func() error { return r.RunOnce(ctx, job, at(-2), fn, opt, obs, ormlock.WithClaim()) },
				func() error { return firing(-1, obs) },
				func() error { return r.RunOnce(ctx, job, at(-7), fn, opt, obs, ormlock.WithLease(10*time.Second)) },
			} {
				if err := call(); !errors.Is(err, ormlock.ErrPaused) || !strings.Contains(err.Error(), "paused by alice: incident 42") {
					t.Errorf("call %d of a paused job: %v, want ErrPaused with the reason", i, err)
				}
			}
			if n := calls.Load() - before; n != 0 {
				t.Errorf("fn ran %d times for a paused job", n)
			}
			if n := events.Load(); n != 4 {
				t.Errorf("%d EventAlreadyDone wrapping ErrPaused, want 4", n)
			}
			for _, m := range []int{-7, -3, -2, -1} {
				if row := rowAt(t, r, tbl, job, at(m)); row.Status != "skipped" || !strings.Contains(row.Error, "paused by alice") {
					t.Errorf("slot %d: %+v, want skipped by the pause", m, row)
				}
			}
			cs, err := ac.Controls(ctx, opt)
			if err != nil || len(cs) != 1 || !cs[0].Paused || cs[0].Author != "alice" || cs[0].Schedule != "every 1m0s in UTC" {
				t.Errorf("Controls: %+v, %v", cs, err)
			}
		})

		t.Run("resume", func(t *testing.T) {
			if rec := act(ormlock.Resume(job).By("alice", "over")); rec.Outcome != "resumed" {
				t.Errorf("resume: %+v", rec)
			}
			if rec := act(ormlock.Resume(job).By("alice", "")); !strings.HasPrefix(rec.Outcome, "already running") {
				t.Errorf("second resume: %+v", rec)
			}
			before := calls.Load()
			if err := firing(0, ormlock.WithCatchUp(5*time.Minute, ormlock.CatchUpAll)); err != nil {
				t.Fatalf("firing after resume: %v", err)
			}
			done := 0
			for m := -8; m <= 0; m++ {
				row := rowAt(t, r, tbl, job, at(m))
				switch {
				case (m == -7 || m >= -3 && m <= -1) && row.Status != "skipped":
					t.Errorf("paused slot %d after the resume: %+v, want it skipped", m, row)
				case m == 0 && row.Status != "done":
					t.Errorf("current slot after the resume: %+v, want it done", row)
				case row.Status == "done":
					done++
				}
			}
			// the current slot and the window's missed ones, none paused
			if n := calls.Load() - before; n != int64(done) {
				t.Errorf("%d runs after the resume, %d slots done", n, done)
			}
		})

		t.Run("skip", func(t *testing.T) {
			future := at(30)
			if rec := act(ormlock.Skip(job, future).By("carol", "holiday")); !strings.HasSuffix(rec.Outcome, "now skipped") || !rec.Slot.Equal(future) {
				t.Errorf("skip: %+v", rec)
			}
			if rec := act(ormlock.Skip(job, future).By("carol", "")); rec.Outcome != "already skipped" {
				t.Errorf("second skip: %+v", rec)
			}
			for _, mode := range []ormlock.Option{nil, ormlock.WithClaim()} {
				if err := r.RunOnce(ctx, job, future, fn, opt, mode); !errors.Is(err, ormlock.ErrAlreadyDone) {
					t.Errorf("RunOnce of a skipped slot: %v, want ErrAlreadyDone", err)
				}
			}
			if row := rowAt(t, r, tbl, job, future); row.Status != "skipped" || row.Error != "skipped by carol: holiday" {
				t.Errorf("skipped slot: %+v", row)
			}
		})

		t.Run("rerun", func(t *testing.T) {
			failed := at(-6)
			boom := errors.New("boom")
			if err := r.RunOnce(ctx, job, failed, func(txn) error { return boom }, opt, ormlock.WithClaim()); !errors.Is(err, boom) {
				t.Fatalf("failing run: %v", err)
			}
			if rec := act(ormlock.Rerun(job, failed).By("dave", "fixed")); rec.Outcome != "slot was failed; now rerun" {
				t.Errorf("rerun: %+v", rec)
			}
			missed := at(-20)
			if rec := act(ormlock.Rerun(job, missed).By("dave", "")); !strings.HasSuffix(rec.Outcome, "now rerun") {
				t.Errorf("rerun of a missed slot: %+v", rec)
			}
			before := calls.Load()
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i := range errs {
				wg.Go(func() { errs[i] = firing(1) })
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil && !errors.Is(err, ormlock.ErrNotAcquired) && !errors.Is(err, ormlock.ErrAlreadyDone) {
					t.Errorf("firing %d: %v", i, err)
				}
			}
			if n := calls.Load() - before; n != 3 {
				t.Errorf("%d runs of two firings, want 3: the failed slot, the missed slot and the current one, once each", n)
			}
			for _, s := range []time.Time{failed, missed, at(1)} {
				if row := rowAt(t, r, tbl, job, s); row.Status != "done" {
					t.Errorf("rerun slot %s: %+v", s, row)
				}
			}
		})

		t.Run("bad input", func(t *testing.T) {
			before, err := ac.Actions(ctx, "", 100, opt)
			if err != nil {
				t.Fatal(err)
			}
			runs := len(runsOf(t, r, tbl, job))
			for name, x := range map[string]ormlock.Action{
				"no author":          ormlock.Pause(job),
				"blank author":       ormlock.Skip(job, at(40)).By("  ", "x"),
				"slot not a firing":  ormlock.Skip(job, at(40).Add(30*time.Second)).By("eve", ""),
				"skip of a done one": ormlock.Skip(job, at(0)).By("eve", ""),
				"rerun of a done":    ormlock.Rerun(job, at(0)).By("eve", ""),
				"no job":             ormlock.Pause("").By("eve", ""),
				"fraction of second": ormlock.Rerun(job, at(40).Add(time.Millisecond)).By("eve", ""),
				"no kind":            {Job: job, Author: "eve"},
			} {
				if _, err := ac.Act(ctx, x, opt); !errors.Is(err, ormlock.ErrInvalidArgument) {
					t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
				} else if name == "slot not a firing" && !strings.Contains(err.Error(), "not a firing") {
					t.Errorf("%s: %v, want it to say so", name, err)
				}
			}
			after, err := ac.Actions(ctx, "", 100, opt)
			if err != nil || len(after) != len(before) {
				t.Errorf("refused actions were logged: %d entries, then %d (%v)", len(before), len(after), err)
			}
			if n := len(runsOf(t, r, tbl, job)); n != runs {
				t.Errorf("refused actions changed the ledger: %d rows, then %d", runs, n)
			}
			if len(after) < 2 || after[0].ID <= after[1].ID || after[0].Job != job {
				t.Errorf("Actions, newest first: %+v", after)
			}
			if mine, err := ac.Actions(ctx, job, 3, opt); err != nil || len(mine) != 3 {
				t.Errorf("Actions(job, 3): %d, %v", len(mine), err)
			}
			if _, err := ac.Actions(ctx, job, 0, opt); !errors.Is(err, ormlock.ErrInvalidArgument) {
				t.Errorf("Actions with limit 0: %v", err)
			}
		})
	})
}

// rowAt reads the ledger row of job at slot through r (zero when none).
func rowAt(t *testing.T, r runner, tbl, job string, slot time.Time) ormlock.Run {
	t.Helper()
	for _, row := range runsOf(t, r, tbl, job) {
		if row.Slot.Equal(slot) {
			return row
		}
	}
	return ormlock.Run{}
}

// RunOnce of a paused job inside the caller's transaction (gormlock in
// db.Transaction, on PostgreSQL): ErrPaused, fn not called, and the slot
// recorded 'skipped' in that transaction, which commits it.
func TestPausedRunOnceNested(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			g := gormWith(t, k).(gormLocker)
			tbl := ledgerTable(t, k, g)
			opt := ormlock.WithLedgerTable(tbl)
			job := "nested-paused-" + string(k)
			if _, err := g.Act(context.Background(), ormlock.Pause(job).By("alice", "nested"), opt); err != nil {
				t.Fatal(err)
			}
			ran := false
			err := g.db.Transaction(func(tx *gorm.DB) error {
				err := gormlock.RunOnce(tx, job, testdb.Slot(0), func(*gorm.DB) error { ran = true; return nil }, opt)
				if !errors.Is(err, ormlock.ErrPaused) {
					return fmt.Errorf("nested RunOnce of a paused job: %v, want ErrPaused", err)
				}
				return nil
			})
			if err != nil || ran {
				t.Fatalf("outer transaction: %v (fn ran: %v)", err, ran)
			}
			if row := rowAt(t, g, tbl, job, testdb.Slot(0)); row.Status != "skipped" || row.Error != "paused by alice: nested" {
				t.Errorf("nested paused slot: %+v", row)
			}
		})
	}
}
