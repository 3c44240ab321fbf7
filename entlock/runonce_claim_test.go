package entlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // zone data for the DST tests, whatever the machine has

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/enttest"
	"github.com/ormlock/ormlock/internal/enttest/ent"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/testdb"
)

func TestRunOnceClaim(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		client1, _ := openEnt(t, k)
		client2, _ := openEnt(t, k)
		tbl := ledgerTable(t, k, client1)
		owner := enttest.Owner(t, k)
		job := "claim-" + t.Name()
		slot := slotAt(3)
		opts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithClaim()}

		inFn, proceed := make(chan struct{}), make(chan struct{})
		result := make(chan error, 1)
		var atCommit []ormlock.Run
		var atCommitErr error
		go func() {
			result <- entlock.RunOnce(ctx, client1, job, slot, func(tx *ent.Tx) error {
				if err := insert(ctx, tx, owner, 1); err != nil {
					return err
				}
				// fn's transaction commits before the row is marked done
				tx.OnCommit(func(next ent.Committer) ent.Committer {
					return ent.CommitFunc(func(ctx context.Context, tx *ent.Tx) error {
						err := next.Commit(ctx, tx)
						atCommit, atCommitErr = entlock.Runs(ctx, client2, job, 5, ormlock.WithLedgerTable(tbl))
						return err
					})
				})
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
		// while fn runs: the running row is visible from another pool; fn's
		// own write is not, it is in fn's transaction
		rs := runs(t, client2, tbl, job)
		if len(rs) != 1 || rs[0].Status != ormlock.RunRunning || rs[0].Owner != "one" || !rs[0].Finished.IsZero() || rs[0].Started.IsZero() {
			fail("ledger during the run: %+v, want one running row owned by one", rs)
		}
		if n := count(t, k, owner); n != 0 {
			fail("fn's write visible during the run (%d rows): fn's tx is not a transaction", n)
		}
		// the lock is held by the session connection, which Holder names
		h, err := entlock.Holder(ctx, client2, keys.RunKey(job, slot))
		if err != nil || !h.Held || h.PID == 0 {
			fail("Holder of the running slot: %v %v", h, err)
		}
		t.Logf("claim-mode holder: %s", h)
		// a second instance, in either mode, is turned away
		for _, mode := range []ormlock.Option{ormlock.WithClaim(), nil} {
			err := entlock.RunOnce(ctx, client2, job, slot, func(*ent.Tx) error { return errors.New("must not run") },
				ormlock.WithLedgerTable(tbl), ormlock.WithOwner("two"), mode)
			if !errors.Is(err, ormlock.ErrNotAcquired) {
				fail("second instance during the run: %v, want ErrNotAcquired", err)
			}
		}
		close(proceed)
		if err := <-result; err != nil {
			t.Fatalf("claim run: %v", err)
		}
		if atCommitErr != nil || len(atCommit) != 1 || atCommit[0].Status != ormlock.RunRunning {
			t.Fatalf("ledger right after fn's commit: %+v %v, want still running", atCommit, atCommitErr)
		}
		rs = runs(t, client2, tbl, job)
		if len(rs) != 1 || rs[0].Status != ormlock.RunDone || rs[0].Owner != "one" || rs[0].Finished.Before(rs[0].Started) || rs[0].Duration < 0 {
			t.Fatalf("ledger after the run: %+v, want done", rs)
		}
		if n := count(t, k, owner); n != 1 {
			t.Fatalf("work rows after the run = %d, want 1", n)
		}
		for _, mode := range []ormlock.Option{ormlock.WithClaim(), nil} {
			err := entlock.RunOnce(ctx, client2, job, slot, func(*ent.Tx) error { return errors.New("must not run") }, ormlock.WithLedgerTable(tbl), mode)
			if !errors.Is(err, ormlock.ErrAlreadyDone) {
				t.Fatalf("after the run: %v, want ErrAlreadyDone", err)
			}
		}
		t.Logf("run took %v by the server's clock", rs[0].Duration)
	})
}

// Claim mode's transaction begins at fn's first statement on it: a job that
// works through the client (or not on the database at all) holds only the
// lock's connection, so a pool of two serves it.
func TestRunOnceClaimLazyTx(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		client, db := openEnt(t, k)
		tbl := ledgerTable(t, k, client)
		db.SetMaxOpenConns(2)
		owner := enttest.Owner(t, k)
		job := "lazy-" + t.Name()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		opts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithClaim()}
		err := entlock.RunOnce(ctx, client, job, slotAt(0), func(*ent.Tx) error {
			for i := range 3 { // each statement commits on its own
				if err := client.Item.Create().SetOwner(owner).SetN(i).Exec(ctx); err != nil {
					return err
				}
			}
			if n := count(t, k, owner); n != 3 {
				return fmt.Errorf("client writes not committed as they went: %d rows", n)
			}
			return nil
		}, opts...)
		if err != nil {
			t.Fatalf("claim run through the client on a pool of 2: %v", err)
		}
		// fn's tx on the same pool of two
		err = entlock.RunOnce(ctx, client, job, slotAt(1), func(tx *ent.Tx) error {
			return insert(ctx, tx, owner, 10)
		}, opts...)
		if err != nil {
			t.Fatalf("claim run through tx on a pool of 2: %v", err)
		}
		if n := count(t, k, owner); n != 4 {
			t.Fatalf("work rows = %d, want 4", n)
		}
		if rs := runs(t, client, tbl, job); len(rs) != 2 || rs[0].Status != ormlock.RunDone || rs[1].Status != ormlock.RunDone {
			t.Fatalf("ledger: %+v", rs)
		}
	})
}

// Losing the lock in claim mode rolls fn's transaction back: no work from a
// run whose slot another instance may take over.
func TestRunOnceClaimLockLost(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		client, _ := openEnt(t, k)
		tbl := ledgerTable(t, k, client)
		owner := enttest.Owner(t, k)
		job := "lost-" + t.Name()
		slot := slotAt(0)
		opts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithClaim(), ormlock.WithKeepalive(100 * time.Millisecond)}
		var killed int64
		start := time.Now()
		err := entlock.RunOnce(ctx, client, job, slot, func(tx *ent.Tx) error {
			if err := insert(ctx, tx, owner, 1); err != nil {
				return err
			}
			h, err := entlock.Holder(ctx, client, keys.RunKey(job, slot))
			if err != nil || !h.Held {
				return fmt.Errorf("holder: %v %v", h, err)
			}
			killed = h.PID
			testdb.Kill(t, k, h.PID)
			deadline := time.Now().Add(30 * time.Second)
			for time.Now().Before(deadline) {
				if _, err := tx.Item.Query().Count(ctx); err != nil {
					return err // the transaction is gone with the lock
				}
				time.Sleep(20 * time.Millisecond)
			}
			return errors.New("fn's transaction survived the lock for 30s")
		}, opts...)
		t.Logf("killed %d; RunOnce returned after %v: %v", killed, time.Since(start).Round(time.Millisecond), err)
		if !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("err = %v, want ErrLockLost", err)
		}
		if n := count(t, k, owner); n != 0 {
			t.Fatalf("work rows = %d: fn's transaction committed after the lock was lost", n)
		}
		rs := runs(t, client, tbl, job)
		if len(rs) != 1 || rs[0].Status != ormlock.RunFailed || !strings.Contains(rs[0].Error, "lock lost") {
			t.Fatalf("ledger after the loss: %+v, want failed with the loss", rs)
		}
		// the next trigger takes the failed row over
		if err := entlock.RunOnce(ctx, client, job, slot, func(tx *ent.Tx) error { return insert(ctx, tx, owner, 2) }, opts...); err != nil {
			t.Fatalf("retry: %v", err)
		}
		if rs := runs(t, client, tbl, job); len(rs) != 1 || rs[0].Status != ormlock.RunDone || rs[0].Error != "" {
			t.Fatalf("ledger after retry: %+v", rs)
		}
		if n := count(t, k, owner); n != 1 {
			t.Fatalf("work rows after retry = %d, want 1", n)
		}
	})
}

// WithTxOptions applies to claim mode's own transaction.
func TestRunOnceClaimTxOptions(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		client, _ := openEnt(t, k)
		tbl := ledgerTable(t, k, client)
		owner := enttest.Owner(t, k)
		job := "txopts-" + t.Name()
		ro := ormlock.WithTxOptions(&sql.TxOptions{ReadOnly: true})
		err := entlock.RunOnce(ctx, client, job, slotAt(0), func(tx *ent.Tx) error {
			return insert(ctx, tx, owner, 1)
		}, ormlock.WithLedgerTable(tbl), ormlock.WithClaim(), ro)
		if err == nil {
			t.Fatal("insert in a read-only claim-mode transaction succeeded")
		}
		t.Logf("read-only: %v", err)
		if rs := runs(t, client, tbl, job); len(rs) != 1 || rs[0].Status != ormlock.RunFailed {
			t.Fatalf("ledger: %+v, want failed", rs)
		}
		if n := count(t, k, owner); n != 0 {
			t.Fatalf("work rows = %d", n)
		}
	})
}
