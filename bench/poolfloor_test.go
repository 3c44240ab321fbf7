package bench_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ormlock/ormlock/bench"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/pgxlock"
)

// BenchmarkPoolFloor is BenchmarkLockFloor on pgx pools, the path
// pgxlock.Transaction takes: with 1 and 8 goroutines (each on its own key,
// each contender on its own pool of goroutines+1), in steps rotated per
// iteration as in BenchmarkInterleavedLink, it runs a plain pgx
// transaction (pgx-tx), pgxlock.Transaction, and by hand on a connection
// acquired from the pool: `BEGIN`; `COMMIT` (raw-begin), the lock as text
// (raw-lock: `BEGIN; SELECT pg_try_advisory_xact_lock(k)`), the text pgxlock
// sends behind a pooler (raw-lock-iso: with
// `current_setting('transaction_isolation')`), and the prepared statement
// pgxlock uses on a direct connection (raw-prepared: `BEGIN; EXECUTE`,
// prepared when the connection opens). It reports each contender's median
// step (µs) and the ratios pgxlock÷pgx-tx, raw-lock÷raw-begin,
// raw-prepared÷raw-begin (what the lock statement costs any client on a
// pool) and pgxlock÷raw-prepared (what is pgxlock's own), on loopback and
// through the simulated link (-link-delay each way):
//
//	cd bench && go test -run '^$' -bench BenchmarkPoolFloor -benchtime 300x -count 3 .
func BenchmarkPoolFloor(b *testing.B) {
	onNetworks(b, func(b *testing.B, links *bench.Links) {
		dsn := routed(b, links, bench.Target{Name: bench.NamePostgres, Dialect: bench.Postgres, DSN: testdb.DSN(b, testdb.Postgres)}).DSN
		for _, workers := range []int{1, 8} {
			b.Run(fmt.Sprintf("%dg", workers), func(b *testing.B) { poolFloor(b, dsn, workers) })
		}
	})
}

func poolFloor(b *testing.B, dsn string, workers int) {
	ctx := context.Background()
	pool := func(prepare string) *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			b.Fatal(err)
		}
		cfg.MaxConns = int32(workers + 1)
		if prepare != "" {
			cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
				_, err := c.PgConn().Exec(ctx, prepare).ReadAll()
				return err
			}
		}
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(p.Close)
		return p
	}
	// by hand: first (with the goroutine's key for %d), then COMMIT, on a
	// connection acquired from p
	byHand := func(p *pgxpool.Pool, first string) func(w int) bench.Attempt {
		return func(w int) bench.Attempt {
			q := first
			if strings.Contains(q, "%d") {
				q = fmt.Sprintf(q, -4242420000-int64(w))
			}
			return func(ctx context.Context) (bool, error) {
				c, err := p.Acquire(ctx)
				if err != nil {
					return false, err
				}
				defer c.Release()
				if _, err := c.Conn().PgConn().Exec(ctx, q).ReadAll(); err != nil {
					return false, err
				}
				_, err = c.Conn().PgConn().Exec(ctx, "COMMIT").ReadAll()
				return err == nil, err
			}
		}
	}
	txPool, lockPool := pool(""), pool("")
	names := []string{"pgx-tx", "pgxlock", "raw-begin", "raw-lock", "raw-lock-iso", "raw-prepared"}
	makers := []func(w int) bench.Attempt{
		func(int) bench.Attempt {
			return func(ctx context.Context) (bool, error) {
				return true, pgx.BeginFunc(ctx, txPool, func(pgx.Tx) error { return nil })
			}
		},
		func(w int) bench.Attempt {
			key := uniq(fmt.Sprintf("%s-%d", b.Name(), w))
			return func(ctx context.Context) (bool, error) {
				return true, pgxlock.Transaction(ctx, lockPool, key, func(context.Context, pgx.Tx) error { return nil })
			}
		},
		byHand(pool(""), "BEGIN"),
		byHand(pool(""), "BEGIN; SELECT pg_try_advisory_xact_lock((%d)::int8)"),
		byHand(pool(""), "BEGIN; SELECT pg_try_advisory_xact_lock((%d)::int8), current_setting('transaction_isolation')"),
		byHand(pool("PREPARE floor_lock(int8) AS SELECT pg_try_advisory_xact_lock($1), current_setting('transaction_isolation')"), "BEGIN; EXECUTE floor_lock(%d)"),
	}
	attempts := make([][]bench.Attempt, len(makers))
	for i, m := range makers {
		for w := range workers {
			attempts[i] = append(attempts[i], m(w))
		}
	}
	p50 := stepMedians(b, names, attempts, workers)
	for _, q := range [][2]string{{"pgxlock", "pgx-tx"}, {"raw-lock", "raw-begin"}, {"raw-prepared", "raw-begin"}, {"pgxlock", "raw-prepared"}} {
		b.ReportMetric(p50[q[1]]/p50[q[0]], q[0]+"÷"+q[1])
	}
}
