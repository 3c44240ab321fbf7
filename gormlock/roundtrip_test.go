package gormlock_test

import (
	"testing"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/gormtest"
	"github.com/ormlock/ormlock/internal/stmtlog"
	"github.com/ormlock/ormlock/internal/testdb"
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
