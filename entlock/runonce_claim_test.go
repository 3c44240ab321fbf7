package entlock_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"
	_ "time/tzdata" // zone data for the DST tests, whatever the machine has

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/enttest"
	"github.com/ormlock/ormlock/internal/enttest/ent"
	"github.com/ormlock/ormlock/internal/testdb"
)

// Claim mode's own transaction commits fn's work before the row is marked
// done: right after fn's COMMIT the row still says running. The rest of
// claim mode is TestRunOnceClaim and its neighbours in internal/conformance.
func TestRunOnceClaimCommitsBeforeDone(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		client1, _ := openEnt(t, k)
		client2, _ := openEnt(t, k)
		tbl := ledgerTable(t, k, client1)
		owner := enttest.Owner(t, k)
		job := "claim-" + t.Name()
		var atCommit []ormlock.Run
		var atCommitErr error
		err := entlock.RunOnce(ctx, client1, job, testdb.Slot(3), func(tx *ent.Tx) error {
			if err := insert(ctx, tx, owner, 1); err != nil {
				return err
			}
			tx.OnCommit(func(next ent.Committer) ent.Committer {
				return ent.CommitFunc(func(ctx context.Context, tx *ent.Tx) error {
					err := next.Commit(ctx, tx)
					atCommit, atCommitErr = entlock.Runs(ctx, client2, job, 5, ormlock.WithLedgerTable(tbl))
					return err
				})
			})
			return nil
		}, ormlock.WithLedgerTable(tbl), ormlock.WithClaim())
		if err != nil {
			t.Fatalf("claim run: %v", err)
		}
		if atCommitErr != nil || len(atCommit) != 1 || atCommit[0].Status != "running" {
			t.Fatalf("ledger right after fn's commit: %+v %v, want still running", atCommit, atCommitErr)
		}
		if rs := runs(t, client2, tbl, job); len(rs) != 1 || rs[0].Status != "done" {
			t.Fatalf("ledger after the run: %+v, want done", rs)
		}
		if n := count(t, k, owner); n != 1 {
			t.Fatalf("work rows after the run = %d, want 1", n)
		}
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
		err := entlock.RunOnce(ctx, client, job, testdb.Slot(0), func(*ent.Tx) error {
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
		err = entlock.RunOnce(ctx, client, job, testdb.Slot(1), func(tx *ent.Tx) error {
			return insert(ctx, tx, owner, 10)
		}, opts...)
		if err != nil {
			t.Fatalf("claim run through tx on a pool of 2: %v", err)
		}
		if n := count(t, k, owner); n != 4 {
			t.Fatalf("work rows = %d, want 4", n)
		}
		if rs := runs(t, client, tbl, job); len(rs) != 2 || rs[0].Status != "done" || rs[1].Status != "done" {
			t.Fatalf("ledger: %+v", rs)
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
		err := entlock.RunOnce(ctx, client, job, testdb.Slot(0), func(tx *ent.Tx) error {
			return insert(ctx, tx, owner, 1)
		}, ormlock.WithLedgerTable(tbl), ormlock.WithClaim(), ro)
		if err == nil {
			t.Fatal("insert in a read-only claim-mode transaction succeeded")
		}
		t.Logf("read-only: %v", err)
		if rs := runs(t, client, tbl, job); len(rs) != 1 || rs[0].Status != "failed" {
			t.Fatalf("ledger: %+v, want failed", rs)
		}
		if n := count(t, k, owner); n != 0 {
			t.Fatalf("work rows = %d", n)
		}
	})
}
