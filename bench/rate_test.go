package bench_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ormlock/ormlock/bench"
	"github.com/ormlock/ormlock/internal/testdb"
)

// BenchmarkRate: acquisitions per second of ormlock.Rate beside a plain
// transaction and a Redis GCRA limiter, for one hot key and across 10,000
// keys, on loopback and over the link, then for the hot key again with
// 1,000,000 token rows of other keys in the table (history). Each attempt
// runs an empty critical section; 8 goroutines. Reported: acq/s (admitted
// attempts per second of wall time), attempts/s (admitted or refused) and
// refused/op. Redis, which Links does not route, goes over a link of its
// own of the same delay.
//
//	go test -run '^$' -bench BenchmarkRate -benchtime 2s -link-delay 250us
func BenchmarkRate(b *testing.B) {
	const (
		hotN  = 10000 // the hot key: never the limit at these rates
		manyN = 10    // each of the 10,000 keys
		keys  = 10000
		conns = 8
	)
	targets := []target{
		sqlTarget(bench.NamePostgres, testdb.Postgres),
		sqlTarget(bench.NamePgBouncer, testdb.PgBouncer),
		sqlTarget(bench.NameMariaDB, testdb.MariaDB),
		{name: bench.NameRedis, make: func(tb testing.TB) bench.Target {
			return bench.Targets("", "", "", redisAddr(tb))[0]
		}},
	}
	cases := []struct {
		name string
		n    int
		keys int
		pre  func(b *testing.B, tg target)
	}{
		{"hot", hotN, 1, nil},
		{"keys10k", manyN, keys, nil},
		{"hot-1Mrows", hotN, 1, history},
	}
	onNetworks(b, func(b *testing.B, links *bench.Links) {
		for _, tg := range targets {
			b.Run(tg.name, func(b *testing.B) {
				t := routed(b, links, tg.make(b))
				if links != nil && t.Dialect == bench.Redis {
					// Links routes SQL targets only: the limiter's Redis
					// goes over a link of its own, of the same delay
					l, err := bench.StartLink(t.DSN, *linkDelay)
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { l.Close() })
					t.DSN = l.Addr()
				}
				for _, cs := range cases {
					if cs.pre != nil {
						cs.pre(b, tg)
					}
					for _, c := range bench.RateContenders(cs.n, time.Second) {
						if !c.On(t.Dialect) {
							continue
						}
						b.Run(cs.name+"/"+c.Name, func(b *testing.B) {
							in := open(b, tg, t, c, conns)
							attempts := make([]bench.Attempt, cs.keys)
							for i := range attempts {
								attempts[i] = in.Bind(fmt.Sprintf("rate-bench-%s-%s-%d", tg.name, cs.name, i), func() {})
							}
							ctx := context.Background()
							if w := tg.name + "/" + cs.name + "/" + c.Name; cs.keys > 1 && !warmed[w] {
								// first use inserts each key's rows: outside the measure
								warmed[w] = true
								for _, a := range attempts {
									if _, err := a(ctx); err != nil {
										b.Fatal(err)
									}
								}
							}
							var next, ok, refused atomic.Int64
							b.SetParallelism(4)
							b.ResetTimer()
							start := time.Now()
							b.RunParallel(func(pb *testing.PB) {
								for pb.Next() {
									a := attempts[int(next.Add(1))%len(attempts)]
									took, err := a(ctx)
									switch {
									case err != nil:
										b.Error(err)
										return
									case took:
										ok.Add(1)
									default:
										refused.Add(1)
									}
								}
							})
							elapsed := time.Since(start)
							b.ReportMetric(float64(ok.Load())/elapsed.Seconds(), "acq/s")
							b.ReportMetric(float64(refused.Load())/float64(b.N), "refused/op")
							b.ReportMetric(float64(b.N)/elapsed.Seconds(), "attempts/s")
						})
					}
				}
			})
		}
	})
}

// history inserts 1,000,000 token rows of 10,000 other keys into the rate
// table of tg's server (once per server), as a table that years of keys
// came through would hold.
func history(b *testing.B, tg target) {
	if tg.kind == "" {
		return
	}
	b.Helper()
	db := testdb.Open(b, tg.kind)
	q := `INSERT INTO ormlock_rate_tokens (rkey, tok, free_at) SELECT 'hist-' || (g / 100), g % 100 + 1, 0 FROM generate_series(0, 999999) g ON CONFLICT DO NOTHING`
	if tg.kind.Dialect() == "mysql" {
		q = `INSERT IGNORE INTO ormlock_rate_tokens (rkey, tok, free_at) SELECT CONCAT('hist-', seq DIV 100), seq MOD 100 + 1, 0 FROM seq_0_to_999999`
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := db.ExecContext(ctx, q); err != nil {
		b.Fatalf("history: %v", err)
	}
	var n int64
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM ormlock_rate_tokens").Scan(&n); err != nil {
		b.Fatal(err)
	}
	b.Logf("figure: %s: %d token rows in the rate table", tg.name, n)
}

// warmed are the (target, case) whose keys' rows were inserted already.
var warmed = map[string]bool{}
