package gormlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/stmtlog"
	"github.com/ormlock/ormlock/internal/testdb"
)

// TestTransactionRoundTrips counts the statements each contender sends, in
// PostgreSQL's own statement log (log_statement = all; one line per
// simple-protocol message or extended-protocol execute), directly and behind
// PgBouncer: a locked gormlock.Transaction sends what a plain GORM
// transaction does (BEGIN with the lock, COMMIT), a loser two (BEGIN with
// the lock, ROLLBACK), the hand-written protocol three.
func TestTransactionRoundTrips(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			sl := stmtlog.Start(t, k)
			sqlDB := sl.Open(t)
			db := gormOn(t, k, sqlDB)
			t.Cleanup(func() { testdb.AssertNoLeaks(t, k, sqlDB) })
			name := "rt-" + t.Name()
			noop := func(*gorm.DB) error { return nil }
			ctx := context.Background()

			counts := map[string][]string{
				"gormlock.Transaction": sl.Count(t, func() error { return gormlock.Transaction(db, name, noop) }),
				"gormlock.Transaction (wait)": sl.Count(t, func() error {
					return gormlock.Transaction(db, name, noop, ormlock.WithWait(time.Second))
				}),
				"gorm Transaction, no lock":          sl.Count(t, func() error { return db.Transaction(noop) }),
				"hand-written (BEGIN; lock; COMMIT)": sl.Count(t, func() error { return handwritten(ctx, k, sqlDB, name) }),
			}
			prepared := db.Session(&gorm.Session{PrepareStmt: true})
			counts["gormlock.Transaction, PrepareStmt (fallback)"] = sl.Count(t, func() error { return gormlock.Transaction(prepared, name, noop) })
			release := rawHold(t, k, name)
			counts["gormlock.Transaction, loser"] = sl.Count(t, func() error {
				if err := gormlock.Transaction(db, name, noop); !errors.Is(err, ormlock.ErrNotAcquired) {
					return fmt.Errorf("loser: %v", err)
				}
				return nil
			})
			counts["gormlock.Transaction (wait), loser"] = sl.Count(t, func() error {
				err := gormlock.Transaction(db, name, noop, ormlock.WithWait(20*time.Millisecond))
				if !errors.Is(err, ormlock.ErrNotAcquired) {
					return fmt.Errorf("waiting loser: %v", err)
				}
				return nil
			})
			counts["hand-written, loser"] = sl.Count(t, func() error { return handwritten(ctx, k, sqlDB, name) })
			release()
			want := map[string]int{
				"gormlock.Transaction":               2,
				"gormlock.Transaction (wait)":        2,
				"gorm Transaction, no lock":          2,
				"hand-written (BEGIN; lock; COMMIT)": 3,
				"gormlock.Transaction, loser":        2,
				"gormlock.Transaction (wait), loser": 2,
				"hand-written, loser":                3,
				// GORM's statement cache needs a *sql.Tx: BEGIN, then the lock
				"gormlock.Transaction, PrepareStmt (fallback)": 3,
			}
			for c, lines := range counts {
				t.Logf("%s: %d round trips: %q", c, len(lines), lines)
				if len(lines) != want[c] {
					t.Errorf("%s: %d statements in the server log, want %d: %q", c, len(lines), want[c], lines)
				}
			}
			if first := counts["gormlock.Transaction"]; len(first) > 0 && !(strings.Contains(first[0], "BEGIN") && strings.Contains(first[0], "pg_try_advisory_xact_lock")) {
				t.Errorf("BEGIN and the lock are not one message: %q", first)
			}
		})
	}
}
