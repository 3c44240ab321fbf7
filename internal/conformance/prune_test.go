package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// fillLedger inserts n finished rows of job with status, one per second
// from first, in multi-row statements.
func fillLedger(t *testing.T, k testdb.Kind, r runner, tbl, job, status string, first time.Time, n int) {
	t.Helper()
	for done := 0; done < n; {
		var vals []string
		for ; done < n && len(vals) < 500; done++ {
			ts := first.Add(time.Duration(done) * time.Second).UTC().Format("2006-01-02 15:04:05")
			if k.Dialect() == "postgres" {
				ts += "+00"
			}
			vals = append(vals, fmt.Sprintf("('%s', '%s', '%s', 'filler', '%s', '%s')", job, ts, status, ts, ts))
		}
		q := "INSERT INTO " + tbl + " (job, slot, status, owner, started_at, finished_at) VALUES " + strings.Join(vals, ", ")
		if _, err := r.Pool().Exec(q); err != nil {
			t.Fatalf("fill ledger: %v", err)
		}
	}
}

// Prune deletes old finished rows in batches (more than one batch here),
// keeps recent rows, and never deletes a running claim, even an old one
// whose run is in progress.
func TestPrune(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r := openRunner(t, a, k)
		tbl := ledgerTable(t, k, r)
		opt := ormlock.WithLedgerTable(tbl)
		old := time.Now().Add(-30 * 24 * time.Hour).Truncate(time.Second)
		fillLedger(t, k, r, tbl, "prune-done", "done", old, 2300)
		fillLedger(t, k, r, tbl, "prune-failed", "failed", old, 40)
		fillLedger(t, k, r, tbl, "prune-recent", "done", time.Now().Add(-time.Hour), 30)

		// a run of an old slot still going on: its row is 'running'
		oldSlot := old.Add(-time.Hour)
		started, release := make(chan struct{}), make(chan struct{})
		ran := make(chan error, 1)
		go func() {
			ran <- r.RunOnce(ctx, "prune-running", oldSlot, func(txn) error {
				close(started)
				<-release
				return nil
			}, opt, ormlock.WithClaim())
		}()
		<-started

		n, err := r.Prune(ctx, 24*time.Hour, opt)
		if err != nil {
			t.Fatalf("Prune: %v", err)
		}
		if n != 2340 {
			t.Errorf("Prune deleted %d rows, want 2340", n)
		}
		for job, want := range map[string]int{"prune-done": 0, "prune-failed": 0, "prune-recent": 30, "prune-running": 1} {
			if got := len(runsOf(t, r, tbl, job)); got != want {
				t.Errorf("%s: %d rows left, want %d", job, got, want)
			}
		}
		close(release)
		if err := <-ran; err != nil {
			t.Fatalf("the running claim's RunOnce: %v", err)
		}
		if rs := runsOf(t, r, tbl, "prune-running"); len(rs) != 1 || rs[0].Status != "done" {
			t.Fatalf("the running claim after Prune: %+v", rs)
		}
		// now finished, and old: the next Prune takes it
		if n, err := r.Prune(ctx, 24*time.Hour, opt); err != nil || n != 1 {
			t.Fatalf("second Prune: %d, %v; want 1", n, err)
		}
	})
}

// Bad input every adapter can get; the adapters test their own (a nil
// handle, a transaction).
func TestPruneBadInput(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			r := openRunner(t, a, testdb.Postgres)
			ctx := context.Background()
			if _, err := r.Prune(ctx, 0); !errors.Is(err, ormlock.ErrInvalidArgument) {
				t.Errorf("olderThan 0: %v", err)
			}
			if _, err := r.Prune(ctx, time.Hour, ormlock.WithLedgerTable("x; drop")); !errors.Is(err, ormlock.ErrInvalidArgument) {
				t.Errorf("bad table: %v", err)
			}
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := r.Prune(cctx, time.Hour); !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled context: %v", err)
			}
		})
	}
}

// Pruning a large ledger does not hold up runs: claims of recent slots
// made while Prune works through 20,000 old rows each finish promptly. The
// ledger is the adapters' shared internal/ledger, so one adapter (the
// first) carries this slow test.
func TestPruneConcurrentRuns(t *testing.T) {
	a := adapters[0]
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		r := openRunner(t, a, k)
		tbl := ledgerTable(t, k, r)
		opt := ormlock.WithLedgerTable(tbl)
		fillLedger(t, k, r, tbl, "prune-bulk", "done", time.Now().Add(-60*24*time.Hour).Truncate(time.Second), 20000)
		done := make(chan error, 1)
		var deleted int64
		start := time.Now()
		go func() {
			var err error
			deleted, err = r.Prune(ctx, 24*time.Hour, opt)
			done <- err
		}()
		var slowest time.Duration
		runs := 0
		base := time.Now().Truncate(time.Hour) // recent slots, one per run
		for pruning := true; pruning; runs++ {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Prune: %v", err)
				}
				pruning = false
			default:
			}
			t0 := time.Now()
			err := r.RunOnce(ctx, "prune-live", base.Add(time.Duration(runs)*time.Hour), func(txn) error { return nil }, opt)
			if err != nil {
				t.Fatalf("RunOnce while pruning: %v", err)
			}
			slowest = max(slowest, time.Since(t0))
		}
		t.Logf("Prune deleted %d rows in %v; %d runs meanwhile, the slowest took %v", deleted, time.Since(start), runs, slowest)
		if deleted != 20000 {
			t.Errorf("Prune deleted %d rows, want 20000", deleted)
		}
		if slowest > 2*time.Second {
			t.Errorf("a run took %v while Prune worked", slowest)
		}
	})
}

// Prune deletes the rows of its own namespace only (WithNamespace, none by
// default), the rows Runs reads: services sharing a ledger table prune
// their own runs, never another's.
func TestPruneNamespaces(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r := openRunner(t, a, k)
		tbl := ledgerTable(t, k, r)
		opt := ormlock.WithLedgerTable(tbl)
		old := time.Now().Add(-30 * 24 * time.Hour).Truncate(time.Second)
		nss := []string{"", "billing", "mail"}
		for _, ns := range nss {
			for i := range 3 {
				if err := r.RunOnce(ctx, "prune-ns", old.Add(time.Duration(i)*time.Hour), func(txn) error { return nil }, opt, ormlock.WithNamespace(ns)); err != nil {
					t.Fatalf("RunOnce in %q: %v", ns, err)
				}
			}
		}
		left := func(ns string) int {
			t.Helper()
			rs, err := r.Runs(ctx, "prune-ns", 10, opt, ormlock.WithNamespace(ns))
			if err != nil {
				t.Fatalf("Runs in %q: %v", ns, err)
			}
			return len(rs)
		}
		if n, err := r.Prune(ctx, 24*time.Hour, opt, ormlock.WithNamespace("billing")); err != nil || n != 3 {
			t.Fatalf("Prune in billing: %d, %v; want 3", n, err)
		}
		if got := []int{left(""), left("billing"), left("mail")}; got[0] != 3 || got[1] != 0 || got[2] != 3 {
			t.Fatalf("rows left in \"\", billing, mail: %v; want [3 0 3]", got)
		}
		if n, err := r.Prune(ctx, 24*time.Hour, opt); err != nil || n != 3 {
			t.Fatalf("Prune without a namespace: %d, %v; want 3", n, err)
		}
		if got := []int{left(""), left("billing"), left("mail")}; got[0] != 0 || got[1] != 0 || got[2] != 3 {
			t.Fatalf("rows left in \"\", billing, mail: %v; want [0 0 3]", got)
		}
	})
}
