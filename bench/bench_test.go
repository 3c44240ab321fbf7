package bench_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ormlock/ormlock/bench"
	"github.com/ormlock/ormlock/internal/testdb"
)

func TestMain(m *testing.M) {
	code := testdb.Main(m)
	stopRedis()
	os.Exit(code)
}

var (
	redisOnce sync.Once
	redisSrv  *bench.RedisServer
	redisErr  error
)

// redisAddr returns the address of this test binary's redis-server, started
// on first use and stopped after the tests. Without redis-server the test
// is skipped with the install command (`make test` installs it as root),
// except when CI is set, where a missing server is a failure.
func redisAddr(tb testing.TB) string {
	tb.Helper()
	redisOnce.Do(func() { redisSrv, redisErr = bench.StartRedis() })
	if redisErr != nil {
		if os.Getenv("CI") != "" {
			tb.Fatalf("%v", redisErr)
		}
		tb.Skipf("%v", redisErr)
	}
	return redisSrv.Addr
}

func stopRedis() {
	if redisSrv != nil {
		redisSrv.Close()
	}
}

// target is one benchmark target built on this test binary's servers.
type target struct {
	name string
	kind testdb.Kind // "" for Redis
	make func(tb testing.TB) bench.Target
}

func sqlTarget(name string, k testdb.Kind) target {
	return target{name: name, kind: k, make: func(tb testing.TB) bench.Target {
		tb.Helper()
		dsn := testdb.DSN(tb, k)
		for _, t := range bench.Targets(pick(k == testdb.Postgres, dsn), pick(k == testdb.PgBouncer, dsn), pick(k == testdb.MariaDB, dsn), "") {
			if t.Name == name {
				return t
			}
		}
		tb.Fatalf("no target %s", name)
		return bench.Target{}
	}}
}

func pick(ok bool, s string) string {
	if ok {
		return s
	}
	return ""
}

func allTargets() []target {
	return []target{
		sqlTarget(bench.NamePostgres, testdb.Postgres),
		sqlTarget(bench.NamePgBouncer, testdb.PgBouncer),
		sqlTarget(bench.NameMariaDB, testdb.MariaDB),
		sqlTarget(bench.NameMariaDBInterp, testdb.MariaDB),
		{name: bench.NameRedis, make: func(tb testing.TB) bench.Target {
			return bench.Targets("", "", "", redisAddr(tb))[0]
		}},
	}
}

// open opens contender c on t for the test, closes it afterwards, and
// checks first that no lock or connection leaked.
func open(tb testing.TB, tg target, t bench.Target, c bench.Contender, conns int) bench.Instance {
	tb.Helper()
	in, err := c.Open(context.Background(), t, conns)
	if err != nil {
		tb.Fatalf("open %s on %s: %v", c.Name, t.Name, err)
	}
	tb.Cleanup(func() {
		if err := in.Close(); err != nil {
			tb.Errorf("close: %v", err)
		}
	})
	if tg.kind != "" {
		tb.Cleanup(func() { testdb.AssertNoLeaks(tb, tg.kind, in.Pools()...) })
	}
	return in
}

// uniq returns a lock key no other test or run uses.
func uniq(s string) string {
	return fmt.Sprintf("smoke-%x-%s", time.Now().UnixNano()&0xffffffffff, s)
}

// TestSmoke runs every contender a few times on every database: it takes a
// free key, loses a key held elsewhere, and never lets two goroutines into
// the critical section of one key at once.
func TestSmoke(t *testing.T) {
	for _, tg := range allTargets() {
		t.Run(tg.name, func(t *testing.T) {
			bt := tg.make(t)
			for _, c := range bench.Contenders() {
				if !c.On(bt.Dialect) {
					continue
				}
				t.Run(c.Name, func(t *testing.T) {
					in := open(t, tg, bt, c, 6)
					ctx := context.Background()
					start := time.Now()

					free := in.Bind(uniq("free"), func() {})
					for i := range 3 {
						ok, err := free(ctx)
						if err != nil || !ok {
							t.Fatalf("attempt %d on a free key: ok=%v err=%v", i, ok, err)
						}
					}
					if c.Reference {
						return // takes no lock: nothing to lose or exclude
					}

					key := uniq("held")
					release, err := in.Hold(ctx, key)
					if err != nil {
						t.Fatal(err)
					}
					try := in.Bind(key, func() { t.Error("critical section entered while the key is held elsewhere") })
					if ok, err := try(ctx); err != nil || ok {
						t.Fatalf("attempt on a held key: ok=%v err=%v, want a clean loss", ok, err)
					}
					if err := release(); err != nil {
						t.Fatal(err)
					}
					again := in.Bind(key, func() {})
					if ok, err := again(ctx); err != nil || !ok {
						t.Fatalf("attempt after the holder released: ok=%v err=%v", ok, err)
					}

					// Contended: at most one goroutine inside at any instant.
					one := uniq("one")
					var inside, overlaps, won atomic.Int32
					crit := func() {
						if inside.Add(1) != 1 {
							overlaps.Add(1)
						}
						time.Sleep(time.Millisecond)
						inside.Add(-1)
					}
					var wg sync.WaitGroup
					for range 4 {
						a := in.Bind(one, crit)
						wg.Go(func() {
							for range 5 {
								ok, err := a(ctx)
								if errors.Is(err, bench.ErrDeadlock) {
									t.Logf("lost to a deadlock: %v", err)
									continue
								}
								if err != nil {
									t.Errorf("contended attempt: %v", err)
									return
								}
								if ok {
									won.Add(1)
								}
							}
						})
					}
					wg.Wait()
					if overlaps.Load() != 0 {
						t.Errorf("%d overlapping critical sections", overlaps.Load())
					}
					if won.Load() == 0 {
						t.Error("no contended attempt took the lock")
					}
					t.Logf("%s on %s: %d of 20 contended attempts won; whole smoke test %v", c.Name, bt.Name, won.Load(), time.Since(start).Round(time.Millisecond))
				})
			}
		})
	}
}

// TestRunReport runs the whole harness with very short cells on every
// database and checks that the table and the chart come out.
func TestRunReport(t *testing.T) {
	var ts []bench.Target
	var kinds []testdb.Kind
	for _, tg := range allTargets() {
		var bt bench.Target
		ok := t.Run("start "+tg.name, func(t *testing.T) { bt = tg.make(t) })
		if ok && bt.Name != "" {
			ts = append(ts, bt)
			if tg.kind != "" {
				kinds = append(kinds, tg.kind)
			}
		}
	}
	if len(ts) == 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("no server available")
		}
		t.Skip("no server available")
	}
	rep, err := bench.Run(context.Background(), ts, bench.Contenders(), bench.Loads(),
		bench.Options{Cell: 40 * time.Millisecond, Rounds: 2, Warmup: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		t.Fatal(err)
	}
	for _, k := range kinds {
		testdb.AssertNoLeaks(t, k)
	}
	var b strings.Builder
	rep.Table(&b)
	rep.Checks(&b)
	out := b.String()
	for _, want := range []string{"| database", bench.CHandwritten, bench.CGormTransaction, bench.LoadHeld.Short} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for _, tg := range ts {
		s := rep.Cell(tg.Name, bench.CHandwritten, bench.Load1)
		if tg.Dialect == bench.Redis {
			s = rep.Cell(tg.Name, bench.CRedisLock, bench.Load1)
		}
		if s == nil || s.Acquired == 0 {
			t.Errorf("%s: no acquisition measured", tg.Name)
		}
		if h := rep.Cell(tg.Name, bench.CHandwritten, bench.LoadHeld); h != nil && h.Acquired != 0 {
			t.Errorf("%s: %d acquisitions of a key held elsewhere", tg.Name, h.Acquired)
		}
	}
	png := filepath.Join(t.TempDir(), "bench.png")
	if err := rep.Chart(png, "test"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(png); err != nil || fi.Size() < 1000 {
		t.Fatalf("chart: %v, %v", fi, err)
	}
	t.Logf("\n%s", out)
}

// ---- go test -bench: the core comparisons ----

// benchContenders runs f for every contender on every database, as
// sub-benchmarks named database/contender.
func benchContenders(b *testing.B, lockOnly bool, f func(b *testing.B, in bench.Instance, key string)) {
	for _, tg := range allTargets() {
		b.Run(tg.name, func(b *testing.B) {
			bt := tg.make(b)
			for _, c := range bench.Contenders() {
				if !c.On(bt.Dialect) || (lockOnly && c.Reference) {
					continue
				}
				b.Run(strings.ReplaceAll(c.Name, " ", "_"), func(b *testing.B) {
					in := open(b, tg, bt, c, 10)
					f(b, in, uniq(b.Name()))
				})
			}
		})
	}
}

// BenchmarkAcquire is one goroutine taking and releasing a free key:
//
//	cd bench && go test -run '^$' -bench BenchmarkAcquire -benchmem -count 6 .
func BenchmarkAcquire(b *testing.B) {
	benchContenders(b, false, func(b *testing.B, in bench.Instance, key string) {
		try := in.Bind(key, func() {})
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if ok, err := try(ctx); err != nil || !ok {
				b.Fatalf("ok=%v err=%v", ok, err)
			}
		}
	})
}

// BenchmarkAcquireParallel is 4×GOMAXPROCS goroutines, each on its own key.
func BenchmarkAcquireParallel(b *testing.B) {
	benchContenders(b, false, func(b *testing.B, in bench.Instance, key string) {
		var n atomic.Int64
		ctx := context.Background()
		b.ReportAllocs()
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			try := in.Bind(fmt.Sprintf("%s-%d", key, n.Add(1)), func() {})
			for pb.Next() {
				if ok, err := try(ctx); err != nil || !ok {
					b.Errorf("ok=%v err=%v", ok, err)
					return
				}
			}
		})
	})
}

// BenchmarkLoser is one goroutine trying a key that another holder keeps:
// every attempt loses.
func BenchmarkLoser(b *testing.B) {
	benchContenders(b, true, func(b *testing.B, in bench.Instance, key string) {
		ctx := context.Background()
		release, err := in.Hold(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		defer func() {
			if err := release(); err != nil {
				b.Error(err)
			}
		}()
		try := in.Bind(key, func() { b.Error("took a held key") })
		b.ReportAllocs()
		for b.Loop() {
			if ok, err := try(ctx); err != nil || ok {
				b.Fatalf("ok=%v err=%v", ok, err)
			}
		}
	})
}

// onNetworks runs f as the sub-benchmarks "loopback" (links nil) and
// "link", where links route targets through a simulated network link of
// -link-delay each way (see routed).
func onNetworks(b *testing.B, f func(b *testing.B, links *bench.Links)) {
	for _, network := range []string{"loopback", "link"} {
		b.Run(network, func(b *testing.B) {
			var links *bench.Links
			if network == "link" {
				links = bench.NewLinks(*linkDelay)
				b.Cleanup(func() { links.Close() })
			}
			f(b, links)
		})
	}
}

// routed is t through links, or t itself when links is nil (loopback).
func routed(b *testing.B, links *bench.Links, t bench.Target) bench.Target {
	b.Helper()
	if links == nil {
		return t
	}
	r, err := links.Route(t)
	if err != nil {
		b.Fatal(err)
	}
	return r
}
