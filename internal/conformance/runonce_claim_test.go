package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/enttest"
	"github.com/ormlock/ormlock/internal/testdb"
)

// RunOnce in claim mode (WithClaim) on every adapter. Where the adapters
// differ, claimInTx says how: gormlock runs fn outside any transaction,
// entlock in a transaction of its own (entlock's own claim tests cover its
// commit order and its lazy transaction).

func TestRunOnceClaim(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r1, r2 := openRunner(t, a, k), openRunner(t, a, k)
		tbl := ledgerTable(t, k, r1)
		owner := enttest.Owner(t, k)
		job := "claim-" + t.Name()
		slot := testdb.Slot(3)
		opts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithClaim()}

		inFn, proceed := make(chan struct{}), make(chan struct{})
		result := make(chan error, 1)
		go func() {
			result <- r1.RunOnce(ctx, job, slot, func(tx txn) error {
				if err := tx.Insert(owner, 1); err != nil {
					return err
				}
				close(inFn)
				<-proceed
				return nil
			}, append(opts, ormlock.WithOwner("one"))...)
		}()
		select {
		case <-inFn:
		case err := <-result:
			t.Fatalf("claim run ended early: %v", err)
		}
		fail := func(format string, args ...any) {
			t.Helper()
			close(proceed)
			<-result
			t.Fatalf(format, args...)
		}
		// while fn runs: the running row is visible from another pool (no
		// commit waits for it); fn's own write is too when fn runs outside
		// a transaction, and is not when it runs in one
		rs := runsOf(t, r2, tbl, job)
		if len(rs) != 1 || rs[0].Status != "running" || rs[0].Owner != "one" || !rs[0].Finished.IsZero() || rs[0].Started.IsZero() {
			fail("ledger during the run: %+v, want one running row owned by one", rs)
		}
		want := 1
		if claimInTx(a) {
			want = 0
		}
		if n := enttest.Count(t, k, owner); n != want {
			fail("fn's write during the run: %d rows, want %d (fn in a transaction: %v)", n, want, claimInTx(a))
		}
		// the lock is held by the session connection, which Holder names
		h, err := r2.Holder(ctx, ormlock.RunKey(job, slot))
		if err != nil || !h.Held || h.PID == 0 {
			fail("Holder of the running slot: %v %v", h, err)
		}
		t.Logf("claim-mode holder: %s", h)
		// a second instance, in either mode, is turned away
		for _, mode := range []ormlock.Option{ormlock.WithClaim(), nil} {
			err := r2.RunOnce(ctx, job, slot, func(txn) error { return errors.New("must not run") },
				ormlock.WithLedgerTable(tbl), ormlock.WithOwner("two"), mode)
			if !errors.Is(err, ormlock.ErrNotAcquired) {
				fail("second instance during the run: %v, want ErrNotAcquired", err)
			}
		}
		close(proceed)
		if err := <-result; err != nil {
			t.Fatalf("claim run: %v", err)
		}
		rs = runsOf(t, r2, tbl, job)
		if len(rs) != 1 || rs[0].Status != "done" || rs[0].Owner != "one" || rs[0].Finished.Before(rs[0].Started) || rs[0].Duration < 0 {
			t.Fatalf("ledger after the run: %+v, want done", rs)
		}
		if n := enttest.Count(t, k, owner); n != 1 {
			t.Fatalf("work rows after the run = %d, want 1", n)
		}
		for _, mode := range []ormlock.Option{ormlock.WithClaim(), nil} {
			err := r2.RunOnce(ctx, job, slot, func(txn) error { return errors.New("must not run") }, ormlock.WithLedgerTable(tbl), mode)
			if !errors.Is(err, ormlock.ErrAlreadyDone) {
				t.Fatalf("after the run: %v, want ErrAlreadyDone", err)
			}
		}
		t.Logf("run took %v by the server's clock", rs[0].Duration)
	})
}

func TestRunOnceClaimFailureAndTakeover(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r := openRunner(t, a, k)
		tbl := ledgerTable(t, k, r)
		job := "takeover-" + t.Name()
		opts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithClaim()}

		// a failed run records its error, truncated and cleaned
		long := "bad \xff byte and a NUL \x00: " + strings.Repeat("é", 3000)
		boom := errors.New(long)
		err := r.RunOnce(ctx, job, testdb.Slot(0), func(txn) error { return boom }, append(opts, ormlock.WithOwner("one"))...)
		if err != boom {
			t.Fatalf("err = %v, want fn's error unchanged", err)
		}
		rs := runsOf(t, r, tbl, job)
		if len(rs) != 1 || rs[0].Status != "failed" || rs[0].Owner != "one" || rs[0].Finished.IsZero() {
			t.Fatalf("ledger after failure: %+v", rs)
		}
		if e := rs[0].Error; len(e) > 4000 || !strings.HasSuffix(e, "…[truncated]") || !strings.HasPrefix(e, "bad \uFFFD byte and a NUL : éé") {
			t.Fatalf("error text (%d bytes) %.60q...%q not cleaned and truncated", len(e), e, e[max(0, len(e)-20):])
		}
		// a retry by another instance takes the failed row over
		if err := r.RunOnce(ctx, job, testdb.Slot(0), func(txn) error { return nil }, append(opts, ormlock.WithOwner("two"))...); err != nil {
			t.Fatalf("retry: %v", err)
		}
		rs = runsOf(t, r, tbl, job)
		if len(rs) != 1 || rs[0].Status != "done" || rs[0].Owner != "two" || rs[0].Error != "" {
			t.Fatalf("ledger after retry: %+v, want done by two, error cleared", rs)
		}

		// a row left running by an owner that died is taken over, in either
		// mode, since the taker holds the lock
		for i, mode := range []ormlock.Option{ormlock.WithClaim(), nil} {
			slot := testdb.Slot(10 + i)
			q := "INSERT INTO " + tbl + " (job, slot, status, owner, started_at) VALUES ($1, $2, 'running', 'dead/1', '2001-01-01 00:00:00')"
			args := []any{job, slot}
			if k.Dialect() == "mysql" {
				q = strings.NewReplacer("$1", "?", "$2", "?").Replace(q)
				args = []any{job, slot.Format("2006-01-02 15:04:05")}
			}
			if _, err := testdb.AdminDB(t, k).Exec(q, args...); err != nil {
				t.Fatal(err)
			}
			if err := r.RunOnce(ctx, job, slot, func(txn) error { return nil }, ormlock.WithLedgerTable(tbl), ormlock.WithOwner("three"), mode); err != nil {
				t.Fatalf("take over a dead owner's row: %v", err)
			}
		}
		for _, run := range runsOf(t, r, tbl, job)[:2] {
			if run.Status != "done" || run.Owner != "three" || run.Started.Year() < 2020 {
				t.Fatalf("dead owner's row not taken over: %+v", run)
			}
		}
	})
}

// Losing the lock in claim mode fails the run with ErrLockLost, recorded in
// the ledger, and the next trigger takes the failed row over. Outside a
// transaction (gormlock) fn's context ends with the loss as its cause; in
// one (entlock) fn's transaction is gone with the lock, and rolled back.
func TestRunOnceClaimLockLost(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r := openRunner(t, a, k)
		tbl := ledgerTable(t, k, r)
		owner := enttest.Owner(t, k)
		job := "lost-" + t.Name()
		slot := testdb.Slot(5)
		opts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithClaim(), ormlock.WithKeepalive(100 * time.Millisecond)}
		var sawCause atomic.Value
		var killed int64
		start := time.Now()
		err := r.RunOnce(ctx, job, slot, func(tx txn) error {
			if claimInTx(a) {
				if err := tx.Insert(owner, 1); err != nil {
					return err
				}
			}
			h, err := r.Holder(ctx, ormlock.RunKey(job, slot))
			if err != nil || !h.Held {
				return fmt.Errorf("holder: %v %v", h, err)
			}
			killed = h.PID
			testdb.Kill(t, k, h.PID)
			if !claimInTx(a) {
				fctx := tx.Context()
				select {
				case <-fctx.Done():
					sawCause.Store(context.Cause(fctx))
					return fctx.Err()
				case <-time.After(30 * time.Second):
					return errors.New("lock loss never reported")
				}
			}
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if _, err := tx.QueryInt("SELECT 1"); err != nil {
					return err // the transaction is gone with the lock
				}
			}
			return errors.New("fn's transaction survived the lock for 30s")
		}, opts...)
		t.Logf("killed %d; RunOnce returned after %v: %v", killed, time.Since(start).Round(time.Millisecond), err)
		if !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("err = %v, want ErrLockLost", err)
		}
		if c, _ := sawCause.Load().(error); !claimInTx(a) && !errors.Is(c, ormlock.ErrLockLost) {
			t.Fatalf("fn's context cause = %v, want ErrLockLost", c)
		}
		if n := enttest.Count(t, k, owner); n != 0 {
			t.Fatalf("work rows = %d: fn's transaction committed after the lock was lost", n)
		}
		rs := runsOf(t, r, tbl, job)
		if len(rs) != 1 || rs[0].Status != "failed" || !strings.Contains(rs[0].Error, "lock lost") {
			t.Fatalf("ledger after the loss: %+v, want failed with the loss", rs)
		}
		// the next trigger takes the failed row over
		if err := r.RunOnce(ctx, job, slot, func(tx txn) error { return tx.Insert(owner, 2) }, opts...); err != nil {
			t.Fatalf("retry: %v", err)
		}
		if rs := runsOf(t, r, tbl, job); len(rs) != 1 || rs[0].Status != "done" || rs[0].Error != "" {
			t.Fatalf("ledger after retry: %+v", rs)
		}
		if n := enttest.Count(t, k, owner); n != 1 {
			t.Fatalf("work rows after retry = %d, want 1", n)
		}
	})
}
