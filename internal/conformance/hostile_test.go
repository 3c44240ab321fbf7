package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
)

// Hostile cases of the shapes and RunOnce that travel in one message on
// PostgreSQL (docs/PROTOCOL.md, Round trips), run on every adapter and
// server: what is refused leaves nothing held and nothing written.

// shortNames are n lock names of the test, short enough for a MySQL lock
// name as they are (so that canonicalOn orders them as the server does).
func shortNames(a adapter, k testdb.Kind, tag string, n int) []string {
	out, now := make([]string, n), time.Now().UnixNano()%1e9
	for i := range out {
		out[i] = fmt.Sprintf("%s-%s-%s-%d-%d", tag, a.name, k, now, i)
	}
	return out
}

// All of 8 whose 5th key in canonical order is held by hand-written SQL:
// refused, try-once and with a wait that ends, fn never runs (nothing
// written), and the keys taken before the refusal are free again.
func TestShapeAllFifthHeld(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		l := a.open(t, k)
		owner := enttest.Owner(t, k)
		names := shortNames(a, k, "f5", 8)
		held := canonicalOn(k, names)[4]
		testdb.RawHold(t, k, "", held)
		for _, opts := range [][]ormlock.Option{nil, {ormlock.WithWait(300 * time.Millisecond)}} {
			err := l.Transaction(context.Background(), ormlock.All(names...), func(tx txn) error { return tx.Insert(owner, 1) }, opts...)
			if !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Errorf("opts %v: %v, want ErrNotAcquired", opts, err)
			}
			if n := enttest.Count(t, k, owner); n != 0 {
				t.Errorf("opts %v: %d rows written, want none", opts, n)
			}
			for _, n := range names {
				if n != held && !free(t, k, n) {
					t.Errorf("opts %v: %s left held", opts, n)
				}
			}
		}
	})
}

// A wait whose budget ends in the middle of the keys: of All of 8, the 3rd
// key in canonical order is held for 1.2 s of a 2 s wait, the 6th for good.
// Each key waits only for what is left of the one budget, so the call ends
// near 2 s (not 1.2 s + 2 s), not acquired, and nothing stays held.
func TestShapeWaitBudgetMidway(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		l := a.open(t, k)
		names := shortNames(a, k, "mw", 8)
		order := canonicalOn(k, names)
		release3 := testdb.RawHold(t, k, "", order[2])
		testdb.RawHold(t, k, "", order[5])
		const wait = 2 * time.Second
		timer := time.AfterFunc(1200*time.Millisecond, release3)
		defer timer.Stop()
		start := time.Now()
		err := l.Transaction(context.Background(), ormlock.All(names...), func(txn) error {
			return errors.New("fn ran without the lock")
		}, ormlock.WithWait(wait))
		took := time.Since(start)
		t.Logf("returned after %v: %v", took.Round(time.Millisecond), err)
		if !errors.Is(err, ormlock.ErrNotAcquired) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%v, want ErrNotAcquired", err)
		}
		if limit := wait + 900*time.Millisecond; took > limit {
			t.Errorf("returned after %v, want within the wait %v (+0.9 s): a key waited past what was left of it", took, wait)
		}
		for _, n := range names {
			if n != order[5] && !waitFree(t, k, n) {
				t.Errorf("%s left held", n)
			}
		}
	})
}

// A semaphore whose slots 1 to 3 are held by hand-written SQL: one free
// slot is taken, and only one. On the one-message path (PostgreSQL and
// PgBouncer, every adapter but sqllock) the slots are tried from slot 1 in
// one statement, so it is slot 4; elsewhere a round starts at a random
// slot.
func TestSemaphoreFirstFreeSlot(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		l := a.open(t, k)
		name := shortNames(a, k, "ff", 1)[0]
		slot := func(i int) string { return fmt.Sprintf("ormlock.semaphore:%s#%d", name, i) }
		for i := 1; i <= 3; i++ {
			testdb.RawHold(t, k, "", slot(i))
		}
		err := l.Transaction(context.Background(), ormlock.Semaphore(name, 10), func(tx txn) error {
			var taken []int
			for i := 4; i <= 10; i++ {
				if !free(t, k, slot(i)) {
					taken = append(taken, i)
				}
			}
			if len(taken) != 1 {
				t.Errorf("slots %v held by this holder, want one", taken)
			}
			if k.Dialect() == "postgres" && a.name != "sqllock" && (len(taken) != 1 || taken[0] != 4) {
				t.Errorf("slots %v taken, want slot 4, the first free one", taken)
			}
			if k == testdb.Postgres {
				n, err := queryInt(tx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
				if err != nil || n != 1 {
					t.Errorf("pg_locks: %d advisory locks of this backend (err %v), want 1", n, err)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for i := 4; i <= 10; i++ {
			if !free(t, k, slot(i)) {
				t.Errorf("slot %d left held", i)
			}
		}
	})
}

// RunOnce whose lock is held elsewhere: not acquired, fn never runs, no
// ledger row is written (on PostgreSQL the claim that travels with the lock
// is skipped by the server); once the lock is free the slot runs.
func TestRunOnceRefusedWritesNothing(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r, tbl := openWithLedger(t, a, k)
		ctx := context.Background()
		job := shortNames(a, k, "ro", 1)[0]
		slot := testdb.Slot(1)
		release := testdb.RawHold(t, k, "", ormlock.RunKey(job, slot).String())
		ran := false
		run := func(opts ...ormlock.Option) error {
			return r.RunOnce(ctx, job, slot, func(txn) error { ran = true; return nil }, append(opts, ormlock.WithLedgerTable(tbl))...)
		}
		for _, opts := range [][]ormlock.Option{nil, {ormlock.WithWait(100 * time.Millisecond)}} {
			if err := run(opts...); !errors.Is(err, ormlock.ErrNotAcquired) || ran {
				t.Fatalf("opts %v: %v (fn ran: %v), want ErrNotAcquired", opts, err, ran)
			}
			if rs := runsOf(t, r, tbl, job); len(rs) != 0 {
				t.Fatalf("opts %v: ledger rows %+v after a refused lock, want none", opts, rs)
			}
		}
		release()
		if err := run(); err != nil || !ran {
			t.Fatalf("the lock free: %v (fn ran: %v)", err, ran)
		}
		if rs := runsOf(t, r, tbl, job); len(rs) != 1 || rs[0].Status != "done" {
			t.Fatalf("ledger rows %+v, want one done", rs)
		}
		if err := run(); !errors.Is(err, ormlock.ErrAlreadyDone) {
			t.Fatalf("again: %v, want ErrAlreadyDone", err)
		}
	})
}

// RunOnce where the server's default isolation is REPEATABLE READ or
// SERIALIZABLE and no level is asked for: the claim that travels with the
// lock claims nothing at such a level (its snapshot predates the lock), the
// transaction is given back and the split protocol runs at that level, so a
// waiter still finds the slot done and does not run fn. Directly on
// PostgreSQL (PgBouncer refuses the start-up parameter).
func TestRunOnceServerDefaultIsolation(t *testing.T) {
	k := testdb.Postgres
	dsn := testdb.DSN(t, k)
	for _, a := range adapters {
		for _, level := range []string{"repeatable%20read", "serializable"} {
			t.Run(a.name+"/"+level, func(t *testing.T) {
				open := func() runner {
					db, err := sql.Open("pgx", testdb.WithParams(dsn, "default_transaction_isolation="+level))
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db); _ = db.Close() })
					return a.on(t, k.Dialect(), db)
				}
				ctx := context.Background()
				ra, rb := open(), open()
				tbl := ledgerTable(t, k, ra)
				ledger := ormlock.WithLedgerTable(tbl)
				owner := enttest.Owner(t, k)
				job := shortNames(a, k, "rodi", 1)[0]
				var wg sync.WaitGroup
				var errA, errB error
				ranB := false
				started := newStart()
				wg.Go(func() {
					errA = ra.RunOnce(ctx, job, testdb.Slot(1), func(tx txn) error { return nextHeld(tx, owner, started, 400*time.Millisecond) }, ledger)
					started.close()
				})
				<-started.ch
				wg.Go(func() {
					errB = rb.RunOnce(ctx, job, testdb.Slot(1), func(tx txn) error { ranB = true; return next(tx, owner) }, ledger, ormlock.WithWait(5*time.Second))
				})
				wg.Wait()
				if errA != nil || !errors.Is(errB, ormlock.ErrAlreadyDone) || ranB {
					t.Fatalf("A: %v; B: %v (fn ran: %v); want nil and ErrAlreadyDone without running", errA, errB, ranB)
				}
				if err := rb.RunOnce(ctx, job, testdb.Slot(2), func(tx txn) error { return next(tx, owner) }, ledger); err != nil {
					t.Fatalf("a fresh slot: %v", err)
				}
				assertSequence(t, k, owner, 2)
				if rs := runsOf(t, rb, tbl, job); len(rs) != 2 || rs[0].Status != "done" || rs[1].Status != "done" {
					t.Fatalf("ledger rows %+v, want two done", rs)
				}
			})
		}
	}
}

// A fn that changes its own run's ledger row (here: marks it failed) leaves
// no claim to mark done: the run is not committed (the mark done, which on
// PostgreSQL travels with COMMIT, refuses it), the error wraps
// ErrLockLost, and neither fn's writes nor a 'done' row remain.
func TestRunOnceFnChangesItsClaim(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r, tbl := openWithLedger(t, a, k)
		owner := enttest.Owner(t, k)
		job := shortNames(a, k, "fc", 1)[0]
		err := r.RunOnce(context.Background(), job, testdb.Slot(1), func(tx txn) error {
			if err := tx.Insert(owner, 1); err != nil {
				return err
			}
			return tx.Exec("UPDATE " + tbl + " SET status = 'failed' WHERE job = '" + job + "'") // job: letters, digits, '-'

		}, ormlock.WithLedgerTable(tbl))
		if !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("%v, want ErrLockLost", err)
		}
		if n := enttest.Count(t, k, owner); n != 0 {
			t.Errorf("%d rows of fn committed, want none", n)
		}
		if rs := runsOf(t, r, tbl, job); len(rs) != 0 {
			t.Errorf("ledger rows %+v, want none", rs)
		}
	})
}
