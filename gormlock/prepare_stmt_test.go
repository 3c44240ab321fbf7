package gormlock_test

import (
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/stmtlog"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/gormtest"
)

// GORM's statement cache (PrepareStmt) needs a *sql.Tx: gormlock.Transaction
// falls back to BEGIN, then the lock, then COMMIT, three statements in
// PostgreSQL's own log, directly and behind PgBouncer. The round trips every
// adapter shares are TestTransactionRoundTrips in internal/conformance.
func TestTransactionRoundTripsPrepareStmt(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			sl := stmtlog.Start(t, k)
			sqlDB := sl.Open(t)
			db := gormtest.On(t, k.Dialect(), sqlDB)
			t.Cleanup(func() { testdb.AssertNoLeaks(t, k, sqlDB) })
			name := "rt-" + t.Name()
			prepared := db.Session(&gorm.Session{PrepareStmt: true})
			lines := sl.Count(t, func() error { return gormlock.Transaction(prepared, name, func(*gorm.DB) error { return nil }) })
			t.Logf("%d round trips: %q", len(lines), lines)
			if len(lines) != 3 {
				t.Errorf("%d statements in the server log, want 3 (BEGIN, then the lock, then COMMIT): %q", len(lines), lines)
			}
		})
	}
}

// With PrepareStmt (GORM's statement cache) Transaction holds the lock
// while fn's statements run, call after call.
func TestTransactionPrepareStmt(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
		t.Run(string(k), func(t *testing.T) {
			db, _ := gormtest.Open(t, k, &gorm.Config{PrepareStmt: true})
			tbl := table(t, k, db)
			key := "prep-" + t.Name()
			for i := range 3 {
				err := gormlock.Transaction(db, key, func(tx *gorm.DB) error {
					if rawFree(t, k, key) {
						return errors.New("lock not held")
					}
					return tx.Exec("INSERT INTO "+tbl+" (id) VALUES (?)", i).Error
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			if n := count(t, db, tbl); n != 3 {
				t.Fatalf("rows = %d", n)
			}
		})
	}
}

// With PrepareStmt the ledger statements bypass GORM's statement cache, as
// the lock statements do.
func TestRunOncePrepareStmt(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
		t.Run(string(k), func(t *testing.T) {
			db, _ := gormtest.Open(t, k, &gorm.Config{PrepareStmt: true})
			tbl := ledgerTable(t, k, db)
			work := table(t, k, db)
			job := "prep-" + t.Name()
			for i, mode := range []ormlock.Option{nil, ormlock.WithClaim(), nil} {
				err := gormlock.RunOnce(db, job, testdb.Slot(i%2), func(tx *gorm.DB) error {
					return tx.Exec("INSERT INTO "+work+" (id) VALUES (?)", i).Error
				}, ormlock.WithLedgerTable(tbl), mode)
				if i == 2 {
					if !errors.Is(err, ormlock.ErrAlreadyDone) {
						t.Fatalf("third run: %v", err)
					}
				} else if err != nil {
					t.Fatal(err)
				}
			}
			if n := count(t, db, work); n != 2 {
				t.Fatalf("work rows = %d, want 2", n)
			}
		})
	}
}
