package bench_test

import (
	"context"
	"flag"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ormlock/ormlock/bench"
	"github.com/ormlock/ormlock/internal/testdb"
)

// BenchmarkInterleaved is the lock-for-free comparison with the finest
// interleaving: one goroutine, a free key, an empty critical section, and
// every iteration runs one attempt of each of hand-written SQL,
// gormlock.Transaction, entlock.Transaction and a plain GORM transaction,
// in an order rotated per iteration, timing each attempt. A burst of other
// load on the machine then hits all four alike, which blocks of a second
// per contender cannot promise on a shared machine. It reports each
// contender's median attempt (µs, metric <contender>-p50-µs) and the ratios
// of acquisitions per second the goal is stated in (the inverse ratios of
// the medians): gormlock÷hand-written and entlock÷hand-written (goal ≥ 1.25)
// and gormlock÷gorm-tx and entlock÷gorm-tx (goal ≥ 0.9). ns/op is one
// iteration: all four attempts. On PostgreSQL directly and behind
// PgBouncer:
//
//	cd bench && go test -run '^$' -bench BenchmarkInterleaved -benchtime 3000x -count 3 .
func BenchmarkInterleaved(b *testing.B) {
	short := map[string]string{
		bench.CHandwritten:     "hand-written",
		bench.CGormTransaction: "gormlock",
		bench.CEntTransaction:  "entlock",
		bench.CGormNoLock:      "gorm-tx",
	}
	for _, tg := range allTargets() {
		if tg.kind != testdb.Postgres && tg.kind != testdb.PgBouncer {
			continue
		}
		b.Run(tg.name, func(b *testing.B) {
			bt := tg.make(b)
			var (
				names    []string
				attempts []bench.Attempt
			)
			for _, c := range bench.Contenders() {
				n, ok := short[c.Name]
				if !ok || !c.On(bt.Dialect) {
					continue
				}
				in := open(b, tg, bt, c, 2)
				names = append(names, n)
				attempts = append(attempts, in.Bind(uniq(b.Name()+"-"+n), func() {}))
			}
			ctx := context.Background()
			run := func(i int) {
				if ok, err := attempts[i](ctx); err != nil || !ok {
					b.Fatalf("%s: ok=%v err=%v", names[i], ok, err)
				}
			}
			b.ReportAllocs()
			p50 := map[string]float64{}
			for i, v := range interleavedMedians(b, names, run) {
				p50[names[i]] = v
			}
			for _, v := range []string{"gormlock", "entlock"} {
				for _, base := range []string{"hand-written", "gorm-tx"} {
					if p50[v] > 0 && p50[base] > 0 {
						b.ReportMetric(p50[base]/p50[v], strings.Join([]string{v, base}, "÷"))
					}
				}
			}
		})
	}
}

// interleavedMedians warms each of the len(names) attempts with 20 untimed
// runs, then runs every one once per iteration of b.Loop in an order rotated
// per iteration, timing each: a burst of other load hits them all alike.
// It reports each one's median as <name>-p50-µs and returns the medians (µs).
func interleavedMedians(b *testing.B, names []string, run func(i int)) []float64 {
	b.Helper()
	for i := range names { // warm the pools and statement caches
		for range 20 {
			run(i)
		}
	}
	lat := make([][]time.Duration, len(names))
	r := 0
	for b.Loop() {
		for j := range names {
			i := (j + r) % len(names)
			t0 := time.Now()
			run(i)
			lat[i] = append(lat[i], time.Since(t0))
		}
		r++
	}
	p50 := make([]float64, len(names))
	for i, n := range names {
		slices.Sort(lat[i])
		p50[i] = float64(lat[i][len(lat[i])/2]) / float64(time.Microsecond)
		b.ReportMetric(p50[i], n+"-p50-µs")
	}
	return p50
}

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

// stepMedians runs the contenders names in steps of workers goroutines at
// once (attempts[i][w] is goroutine w's attempt of contender i, through
// bench.Stepper), interleaved as interleavedMedians does, and returns each
// one's median step (µs) by name.
func stepMedians(b *testing.B, names []string, attempts [][]bench.Attempt, workers int) map[string]float64 {
	b.Helper()
	step, stop := bench.Stepper(context.Background(), names, attempts, workers)
	defer stop()
	p50 := map[string]float64{}
	for i, v := range interleavedMedians(b, names, func(i int) {
		if _, err := step(i); err != nil {
			b.Fatalf("%s: %v", names[i], err)
		}
	}) {
		p50[names[i]] = v
	}
	return p50
}
