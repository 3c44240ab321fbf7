package bench_test

import (
	"context"
	"flag"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ormlock/ormlock/bench"
	"github.com/ormlock/ormlock/internal/testdb"
)

// BenchmarkLockFloor measures what the lock's statement costs by itself on
// one pgx connection, with no ORM and no database/sql: each iteration sends,
// in a rotated order, a bare transaction (`begin`; `commit`), one that runs
// a trivial statement with BEGIN (`BEGIN; SELECT 1`; `commit`) and one that
// takes the lock with BEGIN (`BEGIN; SELECT pg_try_advisory_xact_lock(k)`;
// `commit`) — the same two round trips each. It reports each one's median
// (µs) and the ratio bare ÷ locked, the best a locked transaction can do
// against a plain one on this server, whatever the client. With
// -floor-link, the connection goes through a simulated network link of
// -link-delay each way (see BenchmarkInterleavedLink):
//
//	cd bench && go test -run '^$' -bench BenchmarkLockFloor -benchtime 5000x -count 3 .
//	cd bench && go test -run '^$' -bench BenchmarkLockFloor -benchtime 1000x -count 3 . -floor-link
var floorLink = flag.Bool("floor-link", false, "route BenchmarkLockFloor's connection through a simulated network link of -link-delay each way")

func BenchmarkLockFloor(b *testing.B) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		b.Run(string(k), func(b *testing.B) {
			ctx := context.Background()
			dsn := testdb.DSN(b, k)
			if *floorLink {
				links := bench.NewLinks(*linkDelay)
				defer links.Close()
				t, err := links.Route(bench.Target{Name: string(k), Dialect: bench.Postgres, DSN: dsn})
				if err != nil {
					b.Fatal(err)
				}
				dsn = t.DSN
			}
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close(context.WithoutCancel(ctx))
			names := []string{"bare", "select1", "lock"}
			firsts := []string{"begin", "BEGIN; SELECT 1", "BEGIN; SELECT pg_try_advisory_xact_lock(-4242424242)"}
			run := func(i int) {
				for _, q := range []string{firsts[i], "commit"} {
					if _, err := conn.PgConn().Exec(ctx, q).ReadAll(); err != nil {
						b.Fatalf("%s: %v", q, err)
					}
				}
			}
			p50 := interleavedMedians(b, names, run)
			b.ReportMetric(p50[0]/p50[2], "bare÷lock")
			b.ReportMetric(p50[0]/p50[1], "bare÷select1")
		})
	}
}
