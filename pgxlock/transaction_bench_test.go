package pgxlock_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/pgxlock"
)

// BenchmarkTransaction compares pgxlock.Transaction (empty fn) with a plain
// pgx transaction that takes no lock (pool.Begin, Commit) and with the
// protocol hand-written on pgx (BEGIN, pg_try_advisory_xact_lock, COMMIT),
// side by side in one run, on loopback; client CPU per call is metric
// cpu-µs/op:
//
//	go test -run '^$' -bench BenchmarkTransaction -benchmem -count 6 ./pgxlock/
func BenchmarkTransaction(b *testing.B) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		b.Run(string(k), func(b *testing.B) {
			ctx := context.Background()
			cfg, err := pgxpool.ParseConfig(testdb.DSN(b, k))
			if err != nil {
				b.Fatal(err)
			}
			if k == testdb.PgBouncer {
				cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
			}
			cfg.MaxConns = 2
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(pool.Close)
			name := "bench-" + b.Name()
			noop := func(context.Context, pgx.Tx) error { return nil }
			testdb.BenchCalls(b, "pgxlock", func() error { return pgxlock.Transaction(ctx, pool, name, noop) })
			testdb.BenchCalls(b, "handwritten", func() error {
				return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					var ok bool
					if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))", name).Scan(&ok); err != nil || !ok {
						return fmt.Errorf("the lock: %v %w", ok, err)
					}
					return nil
				})
			})
			testdb.BenchCalls(b, "pgx-tx", func() error { return pgx.BeginFunc(ctx, pool, func(pgx.Tx) error { return nil }) })
		})
	}
}
