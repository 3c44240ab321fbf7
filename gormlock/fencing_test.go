package gormlock_test

import (
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/gormtest"
	"github.com/ormlock/ormlock/internal/testdb"
)

// fenceLedger creates the test's own ledger and fence tables with Migrate
// and drops both after the test; it returns the option naming them.
func fenceLedger(t *testing.T, k testdb.Kind, db *gorm.DB) ormlock.Option {
	t.Helper()
	name := testdb.Table(t, k, "f")
	if err := gormlock.Migrate(db, ormlock.WithLedgerTable(name)); err != nil {
		t.Fatalf("Migrate(%s): %v", name, err)
	}
	return ormlock.WithLedgerTable(name)
}

// TestFencingNested (gormlock's nested transactions) checks a lock taken in a savepoint of an open
// transaction (PostgreSQL): its token is committed on another connection,
// so it survives the outer transaction's rollback.
func TestFencingNested(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			db, _ := gormtest.Open(t, k)
			tbl := fenceLedger(t, k, db)
			key := "fence-nested-" + string(k)
			var inner int64
			errOuter := errors.New("outer rolls back")
			err := db.Transaction(func(outer *gorm.DB) error {
				if err := gormlock.Transaction(outer, key, func(tx *gorm.DB) error {
					inner, _ = gormlock.FencingToken(tx)
					return nil
				}, tbl, ormlock.WithFencing()); err != nil {
					return err
				}
				return errOuter
			})
			if !errors.Is(err, errOuter) {
				t.Fatalf("outer: %v", err)
			}
			if inner < 1 {
				t.Fatalf("nested token %d", inner)
			}
			var after int64
			if err := gormlock.Transaction(db, key, func(tx *gorm.DB) error {
				after, _ = gormlock.FencingToken(tx)
				return nil
			}, tbl, ormlock.WithFencing()); err != nil {
				t.Fatal(err)
			}
			if after <= inner {
				t.Fatalf("token after the outer rollback %d <= %d", after, inner)
			}
		})
	}
}
