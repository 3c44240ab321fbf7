package conformance_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// TestImplicitCommitSentinel: the error of a fn that MySQL/MariaDB
// committed implicitly (a DDL statement inside fn) and that then failed
// matches the public ormlock.ErrImplicitCommit with errors.Is, besides
// fn's own error, for Transaction and a transactional RunOnce of every
// adapter.
func TestImplicitCommitSentinel(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			k := testdb.MariaDB
			ctx := context.Background()
			r := openRunner(t, a, k)
			tbl := ledgerTable(t, k, r)
			scratch := testdb.Table(t, k, "ddl")
			if _, err := testdb.AdminDB(t, k).Exec("CREATE TABLE " + scratch + " (id int)"); err != nil {
				t.Fatal(err)
			}
			errFn := errors.New("fn failed after DDL")
			fn := func(tx txn) error {
				if err := tx.Exec("TRUNCATE TABLE " + scratch); err != nil {
					return err
				}
				return errFn
			}
			check := func(verb string, err error) {
				t.Helper()
				if !errors.Is(err, ormlock.ErrImplicitCommit) || !errors.Is(err, errFn) {
					t.Errorf("%s: %v, want errors.Is ormlock.ErrImplicitCommit and fn's error", verb, err)
				}
			}
			check("Transaction", r.Transaction(ctx, "implicit-sentinel-"+a.name, fn))
			check("RunOnce", r.RunOnce(ctx, "implicit-sentinel-job-"+a.name, testdb.Slot(0), fn, ormlock.WithLedgerTable(tbl)))
		})
	}
}
