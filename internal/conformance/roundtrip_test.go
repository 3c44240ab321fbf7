package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/enttest"
	"github.com/ormlock/ormlock/internal/stmtlog"
	"github.com/ormlock/ormlock/internal/testdb"
)

// TestTransactionRoundTrips counts the statements each contender sends, in
// PostgreSQL's own statement log (log_statement = all; one line per
// simple-protocol message or extended-protocol execute), directly and behind
// PgBouncer: a locked Transaction sends what a plain transaction of the ORM
// does (BEGIN with the lock, COMMIT), a loser two (BEGIN with the lock,
// ROLLBACK), Session's set-up one (BEGIN, transaction_timeout off, the lock
// and the idle timeout read together) and its release one, the hand-written
// protocol three. GORM's PrepareStmt fallback is gormlock's own test;
// sqllock's database/sql BEGIN is sqlBeginRoundTrips.
func TestTransactionRoundTrips(t *testing.T) {
	forEachPostgresInTurn(t, func(t *testing.T, a adapter, k testdb.Kind) {
		sl := stmtlog.Start(t, k)
		db := sl.Open(t)
		enttest.Migrate(t, k)
		t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
		r := a.on(t, k.Dialect(), db)
		ctx := context.Background()
		name := "rt-" + t.Name()
		noop := func(txn) error { return nil }
		counts := map[string][]string{
			"Transaction":              sl.Count(t, func() error { return r.Transaction(ctx, name, noop) }),
			"Transaction (wait)":       sl.Count(t, func() error { return r.Transaction(ctx, name, noop, ormlock.WithWait(time.Second)) }),
			"ORM transaction, no lock": sl.Count(t, func() error { return r.PlainTx(ctx) }),
			"Session": sl.Count(t, func() error {
				return r.Session(ctx, name, func(context.Context) error { return nil })
			}),
			"hand-written (BEGIN; lock; COMMIT)": sl.Count(t, func() error { return testdb.Handwritten(ctx, k, db, name) }),
		}
		release := testdb.RawHold(t, k, "", name)
		counts["Transaction, loser"] = sl.Count(t, func() error {
			if err := r.Transaction(ctx, name, noop); !errors.Is(err, ormlock.ErrNotAcquired) {
				return fmt.Errorf("loser: %v", err)
			}
			return nil
		})
		counts["Transaction (wait), loser"] = sl.Count(t, func() error {
			if err := r.Transaction(ctx, name, noop, ormlock.WithWait(20*time.Millisecond)); !errors.Is(err, ormlock.ErrNotAcquired) {
				return fmt.Errorf("waiting loser: %v", err)
			}
			return nil
		})
		counts["hand-written, loser"] = sl.Count(t, func() error { return testdb.Handwritten(ctx, k, db, name) })
		release()
		want := map[string]int{
			"Transaction":                        2,
			"Transaction (wait)":                 2,
			"ORM transaction, no lock":           2,
			"Session":                            2,
			"hand-written (BEGIN; lock; COMMIT)": 3,
			"Transaction, loser":                 2,
			"Transaction (wait), loser":          2,
			"hand-written, loser":                3,
		}
		sqlBeginRoundTrips(a, want)
		for c, lines := range counts {
			t.Logf("%s: %d round trips: %q", c, len(lines), lines)
			if len(lines) != want[c] {
				t.Errorf("%s: %d statements in the server log, want %d: %q", c, len(lines), want[c], lines)
			}
		}
		if first := counts["Transaction"]; a.name != "sqllock" && len(first) > 0 && !(strings.Contains(first[0], "BEGIN") && strings.Contains(first[0], "pg_try_advisory_xact_lock")) {
			t.Errorf("BEGIN and the lock are not one message: %q", first)
		}
	})
}
