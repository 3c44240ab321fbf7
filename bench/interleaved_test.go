package bench_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

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
