package bench_test

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock/bench"
	"github.com/ormlock/ormlock/internal/testdb"
)

// TestFreeTable runs the lock-for-free harness (bench.Free) with tiny cells
// (1 and 2 goroutines, 2 rounds of 2 iterations) on PostgreSQL, PgBouncer
// and MariaDB through a link, and the allocation counts on loopback, and
// checks that every cell and row comes out and that no lock or connection
// is left behind. No figure is asserted.
func TestFreeTable(t *testing.T) {
	var routed, loopback []bench.Target
	var kinds []testdb.Kind
	links := bench.NewLinks(50 * time.Microsecond)
	defer func() {
		if err := links.Close(); err != nil {
			t.Error(err)
		}
	}()
	for _, tg := range allTargets()[:3] {
		bt := tg.make(t)
		rt, err := links.Route(bt)
		if err != nil {
			t.Fatal(err)
		}
		loopback, routed, kinds = append(loopback, bt), append(routed, rt), append(kinds, tg.kind)
	}
	rep, err := bench.Free(context.Background(), routed, loopback,
		bench.FreeOptions{Workers: []int{1, 2}, Rounds: 2, Steps: 2, Warmup: 1, AllocCalls: 5})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kinds {
		testdb.AssertNoLeaks(t, k)
	}
	if len(rep.Cells) != 6 {
		t.Fatalf("%d cells, want 6 (3 targets × 2 goroutine counts)", len(rep.Cells))
	}
	for _, c := range rep.Cells {
		if c.Rounds != 2 {
			t.Errorf("%s, %d goroutines: %d rounds, want 2", c.Target.Name, c.Workers, c.Rounds)
		}
		for _, q := range bench.FreeRatios {
			s, ok := c.Ratios[q.Key()]
			want := c.Target.Dialect == bench.Postgres || q.GoalMySQL > 0
			if ok != want || (ok && (s.N != 2 || s.Median <= 0 || s.Min > s.Median || s.Median > s.Max)) {
				t.Errorf("%s, %d goroutines, %s: %+v (present %v, want %v)", c.Target.Name, c.Workers, q.Key(), s, ok, want)
			}
		}
		if (c.Floor.N == 2) != (c.Target.Dialect == bench.Postgres) {
			t.Errorf("%s, %d goroutines: floor %+v", c.Target.Name, c.Workers, c.Floor)
		}
	}
	if want := 10 + 10 + 7; len(rep.Allocs) != want {
		t.Errorf("%d allocation counts, want %d", len(rep.Allocs), want)
	}
	for _, a := range rep.Allocs {
		if a.Allocs <= 0 || a.Bytes <= 0 {
			t.Errorf("allocations of %s on %s: %+v", a.Contender, a.Target, a)
		}
	}
	var b strings.Builder
	m := bench.ThisMachine()
	m.Link = "test link"
	rep.Markdown(&b, m, "go test -run TestFreeTable")
	out := b.String()
	for _, want := range []string{
		"| contender vs", "direct, 1 goroutine", "PgBouncer, 2", "MariaDB, 2",
		"pgxlock.Transaction vs `pool.Begin`/`Commit`", "gormlock.Transaction vs `db.Transaction`",
		"floor: bare ÷ locked", "CPU busy", "load average", "Allocations per call", "Goals: met in",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q", want)
		}
	}
	t.Logf("\n%s", out)
}

var freeSteps = flag.Int("free-steps", 40, "iterations per round of BenchmarkFree (rounds: b.N / -free-steps)")

// BenchmarkFree is the lock-for-free table of ormlockbench -link (bench.Free)
// as go test -bench: per database (PostgreSQL directly and behind PgBouncer,
// MariaDB with the driver's defaults and with interpolateParams=true) and
// goroutine count (1, 8), through a link of -link-delay (default 250 µs)
// each way, every adapter against its plain transaction and its
// hand-written protocol in interleaved steps (bench.MeasureFreeCell), b.N
// iterations in rounds of -free-steps. Metrics: each ratio's median of the
// per-round ratios (e.g. gormlock÷gorm-tx; min- and max- prefixed for its
// range), the floor (floor-bare÷floor-lock, PostgreSQL), each contender's
// median step (<name>-p50-µs), the 1-minute load average at the end of the
// cell (load1) and the busy share of all CPUs over it (cpu-busy-%):
//
//	cd bench && go test -run '^$' -bench BenchmarkFree -benchtime 480x .
func BenchmarkFree(b *testing.B) {
	links := bench.NewLinks(*linkDelay)
	b.Cleanup(func() { links.Close() })
	targets := []target{
		sqlTarget(bench.NamePostgres, testdb.Postgres),
		sqlTarget(bench.NamePgBouncer, testdb.PgBouncer),
		sqlTarget(bench.NameMariaDB, testdb.MariaDB),
		sqlTarget(bench.NameMariaDBInterp, testdb.MariaDB),
	}
	for _, tg := range targets {
		b.Run(tg.name, func(b *testing.B) {
			bt, err := links.Route(tg.make(b))
			if err != nil {
				b.Fatal(err)
			}
			for _, workers := range []int{1, 8} {
				b.Run(fmt.Sprintf("%dg", workers), func(b *testing.B) {
					c, err := bench.MeasureFreeCell(context.Background(), bt, workers,
						bench.FreeOptions{Steps: *freeSteps, Loop: b.Loop})
					if err != nil {
						b.Fatal(err)
					}
					for _, q := range bench.FreeRatios {
						if s, ok := c.Ratios[q.Key()]; ok {
							b.ReportMetric(s.Median, q.Key())
							b.ReportMetric(s.Min, "min-"+q.Key())
							b.ReportMetric(s.Max, "max-"+q.Key())
						}
					}
					if c.Floor.N > 0 {
						b.ReportMetric(c.Floor.Median, bench.FreeFloorBare+"÷"+bench.FreeFloorLock)
					}
					for n, d := range c.P50 {
						b.ReportMetric(float64(d)/float64(time.Microsecond), n+"-p50-µs")
					}
					b.ReportMetric(c.Load1After, "load1")
					b.ReportMetric(100*c.CPUBusy, "cpu-busy-%")
				})
			}
		})
	}
}
