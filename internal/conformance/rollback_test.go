package conformance_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// When fn fails and the rollback that follows fails too, every adapter
// ends the call alike (lockproto.FnFailed) and drops neither error. The
// rollback is made to fail by ending fn's own server connection inside fn,
// which is also the lock's: the rollback then finds the lock lost, so the
// error matches ormlock.ErrLockLost and fn's error, names the ROLLBACK and
// says "ormlock: " once. The server rolls the transaction back and frees
// the lock with the connection, and the pool's leak check (no lock, no
// connection in use) still holds. (A rollback that fails on a connection
// that survives adds its failure after fn's error: errs.RolledBack's
// tests.)
func TestRollbackFailureJoinsFnError(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		tbl := ledgerTable(t, k, r)
		boom := errors.New("fn failed")
		killOwn := func(tx txn) error {
			id, err := tx.QueryInt(connIDQuery(k))
			if err != nil {
				return err
			}
			testdb.Kill(t, k, id)
			testdb.WaitGone(t, k, id)
			return boom
		}
		check := func(verb string, err error) {
			t.Helper()
			if !errors.Is(err, boom) || !errors.Is(err, ormlock.ErrLockLost) {
				t.Fatalf("%s: %v, want fn's error and ErrLockLost", verb, err)
			}
			if !strings.Contains(err.Error(), "ROLLBACK") || strings.Count(err.Error(), "ormlock: ") > 1 {
				t.Fatalf("%s: %q, want the failed ROLLBACK named, with \"ormlock: \" once", verb, err)
			}
		}
		ctx := context.Background()
		check("Transaction", r.Transaction(ctx, "rollback-fails", killOwn))
		check("RunOnce", r.RunOnce(ctx, "rollback-fails", testdb.Slot(1), killOwn, ormlock.WithLedgerTable(tbl)))
		if rs := runsOf(t, r, tbl, "rollback-fails"); len(rs) != 0 {
			t.Fatalf("runs after a failed RunOnce: %+v, want none", rs)
		}
		// the lock is free again
		if err := r.Transaction(ctx, "rollback-fails", func(txn) error { return nil }); err != nil {
			t.Fatalf("Transaction after the lost connection: %v", err)
		}
	})
}
