package bench_test

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock/bench"
	"github.com/ormlock/ormlock/internal/testdb"
)

var (
	linkDelay = flag.Duration("link-delay", 250*time.Microsecond, "one-way delay of BenchmarkInterleavedLink's simulated network link")
	linkOnly  = flag.String("link-contenders", "", "comma-separated short names (linkContenders) BenchmarkInterleavedLink runs; empty: all")
)

// linkContenders are the contenders of BenchmarkInterleavedLink, by short
// name, in the order of bench.Contenders: each adapter, the hand-written
// protocol on its driver, and a plain transaction of its stack.
var linkContenders = map[string]string{
	bench.CHandwritten:     "hand-written",
	bench.CGormTransaction: "gormlock",
	bench.CEntTransaction:  "entlock",
	bench.CSQLTransaction:  "sqllock",
	bench.CPgxTransaction:  "pgxlock",
	bench.CPgxHandwritten:  "pgx-hand-written",
	bench.CGormNoLock:      "gorm-tx",
	bench.CEntNoLock:       "ent-tx",
	bench.CSQLNoLock:       "sql-tx",
	bench.CPgxNoLock:       "pgx-tx",
}

// linkRatios are the ratios BenchmarkInterleavedLink reports: each adapter
// over the hand-written protocol on its driver (goals over the link: ≥ 1.25
// for gormlock, entlock and pgxlock, ≥ 0.95 for sqllock, whose
// database/sql BEGIN is a round trip of its own) and over a plain
// transaction of the same stack (goal ≥ 0.9).
var linkRatios = [][2]string{
	{"gormlock", "hand-written"}, {"entlock", "hand-written"},
	{"gormlock", "gorm-tx"}, {"entlock", "ent-tx"},
	{"entlock-ctx", "hand-written"}, {"entlock-ctx", "ent-tx"},
	{"sqllock", "hand-written"}, {"sqllock", "sql-tx"},
	{"pgxlock", "pgx-hand-written"}, {"pgxlock", "pgx-tx"},
}

// BenchmarkInterleavedLink compares, on loopback and through a simulated
// network link (bench.Link: an in-process TCP proxy adding -link-delay, by
// default 250 µs, each way to every connection), the hand-written
// protocol (database/sql; and pgx's own on PostgreSQL), gormlock,
// entlock, sqllock and pgxlock (PostgreSQL only) Transaction and plain
// transactions of each stack, and entlock.Transaction on a context that can
// end (entlock-ctx), with 1 and 8 goroutines, on PostgreSQL directly, behind
// PgBouncer, and MariaDB (driver defaults, and interpolateParams=true).
//
// One iteration runs one step of each contender in an order rotated per
// iteration; a step is one attempt by each of the goroutines at once (each
// on its own free key) and lasts until the last one ends. A burst of other
// load on the machine so hits all contenders alike. It reports each
// contender's median step (µs, metric <contender>-p50-µs; with one
// goroutine, the median attempt) and the ratios of throughput the goals are
// stated in (the inverse ratios of the median steps), e.g. gormlock÷hand-written.
// The link's round trip, measured with pings to an echo server through it,
// is metric link-rtt-p50-µs.
//
//	cd bench && go test -run '^$' -bench BenchmarkInterleavedLink -benchtime 400x -count 3 .
//
// -link-contenders keeps some contenders only (fewer contenders per
// iteration, so each step's neighbours differ), e.g.
// -link-contenders pgxlock,pgx-tx,pgx-hand-written.
func BenchmarkInterleavedLink(b *testing.B) {
	targets := []struct {
		name string
		kind testdb.Kind
	}{
		{bench.NamePostgres, testdb.Postgres},
		{bench.NamePgBouncer, testdb.PgBouncer},
		{bench.NameMariaDB, testdb.MariaDB},
		{bench.NameMariaDBInterp, testdb.MariaDB},
	}
	onNetworks(b, func(b *testing.B, links *bench.Links) {
		for _, tgt := range targets {
			b.Run(tgt.name, func(b *testing.B) {
				tg := sqlTarget(tgt.name, tgt.kind)
				bt := routed(b, links, tg.make(b))
				for _, workers := range []int{1, 8} {
					b.Run(fmt.Sprintf("%dg", workers), func(b *testing.B) {
						interleaveSteps(b, tg, bt, workers, links)
					})
				}
			})
		}
	})
}

// interleaveSteps runs the iterations of BenchmarkInterleavedLink on bt.
func interleaveSteps(b *testing.B, tg target, bt bench.Target, workers int, links *bench.Links) {
	var (
		names []string
		ins   []bench.Instance
	)
	for _, c := range bench.Contenders() {
		n, ok := linkContenders[c.Name]
		if *linkOnly != "" && !slices.Contains(strings.Split(*linkOnly, ","), n) {
			ok = false
		}
		if !ok || !c.On(bt.Dialect) {
			continue
		}
		names = append(names, n)
		ins = append(ins, open(b, tg, bt, c, workers+1))
	}
	// attempts[i][w] is goroutine w's attempt of contender i.
	attempts := make([][]bench.Attempt, len(ins))
	for i, in := range ins {
		for w := range workers {
			attempts[i] = append(attempts[i], in.Bind(uniq(fmt.Sprintf("%s-%s-%d", b.Name(), names[i], w)), func() {}))
		}
	}
	// entlock-ctx: entlock.Transaction on a context that can end (never
	// cancelled here), which bounds the release (MySQL/MariaDB: the COMMIT
	// and RELEASE_LOCK under a deadline) and makes the drivers watch it.
	cctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if i := slices.Index(names, "entlock"); i >= 0 {
		var ws []bench.Attempt
		for w := range workers {
			a := ins[i].Bind(uniq(fmt.Sprintf("%s-entlock-ctx-%d", b.Name(), w)), func() {})
			ws = append(ws, func(context.Context) (bool, error) { return a(cctx) })
		}
		names = append(names, "entlock-ctx")
		attempts = append(attempts, ws)
	}
	// persistent goroutines, started once: a step hands each its
	// contender and waits for all of them
	p50 := stepMedians(b, names, attempts, workers)
	for _, q := range linkRatios {
		if p50[q[0]] > 0 && p50[q[1]] > 0 {
			b.ReportMetric(p50[q[1]]/p50[q[0]], q[0]+"÷"+q[1])
		}
	}
	if links != nil {
		rtt, err := bench.MeasureLinkRTT(links.Delay, 200)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(rtt.P50)/float64(time.Microsecond), "link-rtt-p50-µs")
	}
}

// TestLink routes PostgreSQL, PgBouncer and MariaDB through a link and takes
// a lock through each with the hand-written protocol and gormlock; the
// link's round trip is logged, not asserted.
func TestLink(t *testing.T) {
	links := bench.NewLinks(100 * time.Microsecond)
	defer func() {
		if err := links.Close(); err != nil {
			t.Error(err)
		}
	}()
	for _, tg := range allTargets()[:3] {
		t.Run(tg.name, func(t *testing.T) {
			bt, err := links.Route(tg.make(t))
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range bench.Contenders() {
				if c.Name != bench.CHandwritten && c.Name != bench.CGormTransaction {
					continue
				}
				in := open(t, tg, bt, c, 2)
				if ok, err := in.Bind(uniq("link"), func() {})(context.Background()); err != nil || !ok {
					t.Fatalf("%s through the link: ok=%v err=%v", c.Name, ok, err)
				}
			}
		})
	}
	rtt, err := bench.MeasureLinkRTT(100*time.Microsecond, 50)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rtt)
}
