package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/sqllock"
)

// TestClaimPoolOfOne: claim-mode RunOnce on a pool of one connection is
// refused at once (its lock would hold the only connection, and the
// ledger's claim would wait for another forever), before fn and with
// nothing written or held; under a lease, which holds no connection, it
// runs.
func TestClaimPoolOfOne(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := testdb.Open(t, k)
		db.SetMaxOpenConns(1)
		tbl := testdb.Table(t, k, "claim1")
		lt := ormlock.WithLedgerTable(tbl)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sqllock.Migrate(ctx, db, lt); err != nil {
			t.Fatal(err)
		}
		job, slot := "claim-pool-of-one", testdb.Slot(1)
		ran := 0
		fn := func(context.Context, *sql.Tx) error { ran++; return nil }
		err := sqllock.RunOnce(ctx, db, job, slot, fn, lt, ormlock.WithClaim())
		if !errors.Is(err, ormlock.ErrInvalidArgument) || ran != 0 {
			t.Fatalf("claim mode on a pool of one: %v (fn ran %d times), want ErrInvalidArgument", err, ran)
		}
		t.Logf("refused: %v", err)
		if rs, err := sqllock.Runs(ctx, db, job, 5, lt); err != nil || len(rs) != 0 {
			t.Errorf("runs after the refusal: %v, %v", rs, err)
		}
		if err := sqllock.RunOnce(ctx, db, job, slot, fn, lt, ormlock.WithClaim(), ormlock.WithLease(0)); err != nil || ran != 1 {
			t.Errorf("claim mode under a lease on a pool of one: %v (fn ran %d times)", err, ran)
		}
		testdb.AssertNoLeaks(t, k, db)
	})
}
