package entlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	entsql "entgo.io/ent/dialect/sql"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/enttest"
	"github.com/ormlock/ormlock/internal/enttest/ent"
	"github.com/ormlock/ormlock/internal/stmtlog"
	"github.com/ormlock/ormlock/internal/testdb"
)

// TestRoundTrips counts, in PostgreSQL's statement log, what entlock's
// verbs send, directly and behind PgBouncer: Transaction as many messages
// as a plain ent transaction (BEGIN with the lock, COMMIT), a loser two,
// Session's set-up one (BEGIN, transaction_timeout off, the lock and the
// idle timeout read together) and its release one.
func TestRoundTrips(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			sl := stmtlog.Start(t, k)
			db := sl.Open(t)
			enttest.Migrate(t, k)
			t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
			drv := entlock.Wrap(entsql.OpenDB(k.Dialect(), db))
			client := ent.NewClient(ent.Driver(drv))
			plain := ent.NewClient(ent.Driver(entsql.OpenDB(k.Dialect(), db)))
			ctx := context.Background()
			name := "rt-" + t.Name()
			noop := func(*ent.Tx) error { return nil }

			counts := map[string][]string{
				"entlock.Transaction": sl.Count(t, func() error { return entlock.Transaction(ctx, client, name, noop) }),
				"entlock.Transaction (wait)": sl.Count(t, func() error {
					return entlock.Transaction(ctx, client, name, noop, ormlock.WithWait(time.Second))
				}),
				"ent transaction, no lock": sl.Count(t, func() error {
					tx, err := plain.Tx(ctx)
					if err != nil {
						return err
					}
					return tx.Commit()
				}),
				"entlock.Session": sl.Count(t, func() error {
					return entlock.Session(ctx, client, name, func(context.Context) error { return nil })
				}),
			}
			release := rawHold(t, k, name)
			counts["entlock.Transaction, loser"] = sl.Count(t, func() error {
				if err := entlock.Transaction(ctx, client, name, noop); !errors.Is(err, ormlock.ErrNotAcquired) {
					return fmt.Errorf("loser: %v", err)
				}
				return nil
			})
			release()
			want := map[string]int{
				"entlock.Transaction":        2,
				"entlock.Transaction (wait)": 2,
				"ent transaction, no lock":   2,
				"entlock.Session":            2,
				"entlock.Transaction, loser": 2,
			}
			for c, lines := range counts {
				t.Logf("%s: %d round trips: %q", c, len(lines), lines)
				if len(lines) != want[c] {
					t.Errorf("%s: %d statements in the server log, want %d: %q", c, len(lines), want[c], lines)
				}
			}
		})
	}
}
