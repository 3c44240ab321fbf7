package gormlock_test

import (
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// fenceLedger creates the test's own ledger and fence tables with Migrate
// and drops both after the test; it returns the option naming them.
func fenceLedger(t *testing.T, k testdb.Kind, db *gorm.DB) ormlock.Option {
	t.Helper()
	name := "f_" + keyhashHex(t.Name())
	t.Cleanup(func() {
		admin := testdb.AdminDB(t, k)
		_, _ = admin.Exec("DROP TABLE IF EXISTS " + name)
		_, _ = admin.Exec("DROP TABLE IF EXISTS " + name + "_fence")
	})
	if err := gormlock.Migrate(db, ormlock.WithLedgerTable(name)); err != nil {
		t.Fatalf("Migrate(%s): %v", name, err)
	}
	return ormlock.WithLedgerTable(name)
}

// txToken runs a fenced Transaction on key and returns fn's token; fail
// makes fn return an error (the transaction rolls back).
func txToken(t *testing.T, db *gorm.DB, key string, fail bool, opts ...ormlock.Option) int64 {
	t.Helper()
	var tok int64
	errFail := errors.New("fn failed")
	err := gormlock.Transaction(db, key, func(tx *gorm.DB) error {
		var ok bool
		if tok, ok = gormlock.FencingToken(tx); !ok {
			t.Errorf("Transaction: no fencing token in tx")
		}
		if fail {
			return errFail
		}
		return nil
	}, append(opts, ormlock.WithFencing())...)
	if fail && !errors.Is(err, errFail) || !fail && err != nil {
		t.Fatalf("Transaction: %v", err)
	}
	return tok
}

// TestFencingNested checks a lock taken in a savepoint of an open
// transaction (PostgreSQL): its token is committed on another connection,
// so it survives the outer transaction's rollback.
func TestFencingNested(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			db, _ := openGorm(t, k)
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
			if tok := txToken(t, db, key, false, tbl); tok <= inner {
				t.Fatalf("token after the outer rollback %d <= %d", tok, inner)
			}
		})
	}
}
