package conformance_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
)

// WithTxOptions applies to claim mode's own transaction, on the adapters
// that run a claim-mode fn in one (entlock, sqllock, pgxlock): fn's insert
// in a read-only transaction fails, and the run is failed with no work.
func TestRunOnceClaimTxOptions(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		if !claimInTx(a) {
			t.Skip("claim mode runs fn outside any transaction")
		}
		ctx := context.Background()
		r := openRunner(t, a, k)
		tbl := ledgerTable(t, k, r)
		owner := enttest.Owner(t, k)
		job := "txopts-" + t.Name()
		ro := ormlock.WithTxOptions(&sql.TxOptions{ReadOnly: true})
		err := r.RunOnce(ctx, job, testdb.Slot(0), func(tx txn) error {
			return tx.Insert(owner, 1)
		}, ormlock.WithLedgerTable(tbl), ormlock.WithClaim(), ro)
		if err == nil {
			t.Fatal("insert in a read-only claim-mode transaction succeeded")
		}
		t.Logf("read-only: %v", err)
		if rs := runsOf(t, r, tbl, job); len(rs) != 1 || rs[0].Status != "failed" {
			t.Fatalf("ledger: %+v, want failed", rs)
		}
		if n := enttest.Count(t, k, owner); n != 0 {
			t.Fatalf("work rows = %d", n)
		}
	})
}
