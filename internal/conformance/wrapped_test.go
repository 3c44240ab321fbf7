package conformance_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ormlock/ormlock/internal/stmtlog"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
)

// A pool of sqllock.Open is an ordinary *sql.DB for the other adapters:
// gormlock and entlock on it keep their one message (the protocol reaches
// pgx's connection under the wrapper), and a plain transaction of the ORM
// on it is the ORM's own (the wrapper arms only the BEGIN ormlock asks
// for), directly and behind PgBouncer.
func TestWrappedPoolOtherAdapters(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		for _, a := range adapters {
			if a.name != "gormlock" && a.name != "entlock" {
				continue
			}
			t.Run(a.name+"/"+string(k), func(t *testing.T) {
				sl := stmtlog.Start(t, k)
				base := sl.Open(t)
				enttest.Migrate(t, k)
				w := sqlWrappedOnPool(t, k.Dialect(), base).(sqlLocker).db
				t.Cleanup(func() { testdb.AssertNoLeaks(t, k, w) })
				r := a.on(t, k.Dialect(), w)
				ctx := context.Background()
				name := "wrapped-" + t.Name()
				noop := func(txn) error { return nil }
				locked := sl.Count(t, func() error { return r.Transaction(ctx, name, noop) })
				plain := sl.Count(t, func() error { return r.PlainTx(ctx) })
				if len(locked) != 2 || !strings.Contains(locked[0], "BEGIN") || !strings.Contains(locked[0], "pg_try_advisory_xact_lock") {
					t.Errorf("Transaction on the wrapped pool: %q, want BEGIN with the lock, then COMMIT", locked)
				}
				if len(plain) != 2 || strings.Contains(strings.Join(plain, " "), "advisory") {
					t.Errorf("a plain transaction on the wrapped pool: %q, want the ORM's BEGIN and COMMIT", plain)
				}
			})
		}
	}
}
