package sqllock_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/sqllock"
)

// BenchmarkTransaction compares sqllock.Transaction (empty fn) with the
// hand-written database/sql protocol and a plain database/sql transaction
// that takes no lock, side by side in one run, on loopback; client CPU per
// call is metric cpu-ns/op:
//
//	go test -run '^$' -bench BenchmarkTransaction -benchmem -count 6 ./sqllock/
func BenchmarkTransaction(b *testing.B) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer, testdb.MariaDB} {
		b.Run(string(k), func(b *testing.B) {
			ctx := context.Background()
			db := testdb.Open(b, k)
			name := "bench-" + b.Name()
			noop := func(context.Context, *sql.Tx) error { return nil }
			testdb.BenchCalls(b, "sqllock", func() error { return sqllock.Transaction(ctx, db, name, noop) })
			testdb.BenchCalls(b, "handwritten", func() error { return testdb.Handwritten(ctx, k, db, name) })
			testdb.BenchCalls(b, "sql-tx", func() error {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				return tx.Commit()
			})
		})
	}
}
