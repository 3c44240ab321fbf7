package entlock_test

import (
	"context"
	"testing"

	entsql "entgo.io/ent/dialect/sql"

	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent"
)

// BenchmarkTransaction compares entlock.Transaction (empty fn) with the
// hand-written PostgreSQL protocol (BEGIN; the lock; COMMIT) and with a
// plain ent transaction that takes no lock, side by side in one run:
//
//	go test -run '^$' -bench BenchmarkTransaction -benchmem -count 6 ./entlock/
func BenchmarkTransaction(b *testing.B) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		b.Run(string(k), func(b *testing.B) {
			db := testdb.Open(b, k)
			enttest.Migrate(b, k)
			client := ent.NewClient(ent.Driver(entlock.Wrap(entsql.OpenDB(k.Dialect(), db))))
			plain := ent.NewClient(ent.Driver(entsql.OpenDB(k.Dialect(), db)))
			ctx := context.Background()
			name := "bench-" + b.Name()
			noop := func(*ent.Tx) error { return nil }
			testdb.BenchCalls(b, "entlock", func() error { return entlock.Transaction(ctx, client, name, noop) })
			testdb.BenchCalls(b, "handwritten", func() error { return testdb.Handwritten(ctx, k, db, name) })
			testdb.BenchCalls(b, "ent-no-lock", func() error {
				tx, err := plain.Tx(ctx)
				if err != nil {
					return err
				}
				return tx.Commit()
			})
		})
	}
}
