package bench_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/bench"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/gormtest"
	"gorm.io/gorm"
)

// Shared lock connections (ormlock.WithSharedLockConns) against a
// dedicated connection per Session: the cost of one Session's set-up and
// release, and the server connections that 1,000 held locks need, beside a
// lease table and Redis. docs/BENCHMARKS.md (Shared lock connections)
// reports the figures.

var sharedKinds = []testdb.Kind{testdb.Postgres, testdb.MariaDB}

// holdSessions starts n Sessions on distinct keys of db with opts, each
// holding its lock until the returned stop is called, and returns once all
// hold.
func holdSessions(tb testing.TB, db *gorm.DB, prefix string, n int, opts ...ormlock.Option) (stop func()) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	held := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			err := gormlock.Session(db.WithContext(ctx), fmt.Sprintf("%s-%d", prefix, i), func(ctx context.Context) error {
				held <- nil
				<-ctx.Done()
				return nil
			}, opts...)
			if err != nil {
				held <- err
			}
		})
	}
	for range n {
		if err := <-held; err != nil {
			cancel()
			wg.Wait()
			tb.Fatalf("holding Session: %v", err)
		}
	}
	return func() { cancel(); wg.Wait() }
}

// BenchmarkSessionSharedLockConns: one Session's set-up and release (fn
// does nothing), on a dedicated lock connection, on a shared one that
// opens for it and goes back to the pool after it ("alone"), and on a
// shared one that stays open because 100 other Sessions hold locks on the
// same 4 connections ("100 held").
func BenchmarkSessionSharedLockConns(b *testing.B) {
	shared := []ormlock.Option{ormlock.WithSharedLockConns(4)}
	for _, k := range sharedKinds {
		for _, m := range []struct {
			name string
			opts []ormlock.Option
			bg   int
		}{
			{"dedicated", nil, 0},
			{"shared4-alone", shared, 0},
			{"shared4-100held", shared, 100},
		} {
			b.Run(string(k)+"/"+m.name, func(b *testing.B) {
				db, _ := gormtest.Open(b, k)
				key := uniq("shared-bench")
				fn := func(context.Context) error { return nil }
				if err := gormlock.Session(db, key, fn, m.opts...); err != nil { // server check, warm pool
					b.Fatal(err)
				}
				if m.bg > 0 {
					stop := holdSessions(b, db, uniq("shared-bg"), m.bg, m.opts...)
					defer stop()
				}
				b.ResetTimer()
				for b.Loop() {
					if err := gormlock.Session(db, key, fn, m.opts...); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestConnsPerHeldLocks reports the server connections that 1,000 held
// locks take: Sessions on 4 shared lock connections (counted on the
// server), dedicated Sessions (one connection each, measured on 50), a
// lease table (rows: no connection held) and Redis (keys: the client's
// pool only).
func TestConnsPerHeldLocks(t *testing.T) {
	if os.Getenv("ORMLOCK_BENCH_CONNS") == "" {
		t.Skip("a measurement, not a check (internal/conformance checks the 4 connections): set ORMLOCK_BENCH_CONNS=1 to run it")
	}
	const n = 1000
	for _, k := range sharedKinds {
		t.Run(string(k), func(t *testing.T) {
			db, sqlDB := gormtest.Open(t, k)
			prefix := uniq("shared-1000")
			if err := gormlock.Session(db, prefix+"-warm", func(context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}
			stop := holdSessions(t, db, prefix, n, ormlock.WithSharedLockConns(4))
			holders := serverHolders(t, k)
			t.Logf("%s: %d Sessions WithSharedLockConns(4): %d server connections hold locks; pool: %d open, %d in use",
				k, n, holders, sqlDB.Stats().OpenConnections, sqlDB.Stats().InUse)
			stop()
			if holders > 4 {
				t.Errorf("%d holders, want at most 4", holders)
			}

			stop = holdSessions(t, db, uniq("dedicated-50"), 50)
			t.Logf("%s: 50 dedicated Sessions: %d server connections hold locks (so %d per 1,000)", k, serverHolders(t, k), serverHolders(t, k)*n/50)
			stop()

			tg := sqlTarget(bench.NameMariaDB, k)
			if k == testdb.Postgres {
				tg = sqlTarget(bench.NamePostgres, k)
			}
			bt := tg.make(t)
			in := open(t, tg, bt, contender(t, bench.CLease), 4)
			var releases []func() error
			for i := range n {
				r, err := in.Hold(context.Background(), fmt.Sprintf("%s-lease-%d", prefix, i))
				if err != nil {
					t.Fatal(err)
				}
				releases = append(releases, r)
			}
			st := in.Pools()[0].Stats()
			t.Logf("%s: %d lease rows held: %d connections in use (%d open in the pool)", k, n, st.InUse, st.OpenConnections)
			for _, r := range releases {
				if err := r(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	t.Run("redis", func(t *testing.T) {
		addr := redisAddr(t)
		tg := target{name: bench.NameRedis, make: func(tb testing.TB) bench.Target { return bench.Targets("", "", "", addr)[0] }}
		in := open(t, tg, tg.make(t), contender(t, bench.CRedisLock), 4)
		var releases []func() error
		for i := range n {
			r, err := in.Hold(context.Background(), uniq(fmt.Sprintf("redis-%d", i)))
			if err != nil {
				t.Fatal(err)
			}
			releases = append(releases, r)
		}
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		info, err := c.Info(context.Background(), "clients").Result()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("redis: %d keys held: connected_clients %d (this INFO client included)", n, infoInt(info, "connected_clients"))
		for _, r := range releases {
			if err := r(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// serverHolders counts the server connections holding advisory or named
// locks right now.
func serverHolders(t *testing.T, k testdb.Kind) int {
	t.Helper()
	q := "SELECT count(DISTINCT pid) FROM pg_locks WHERE locktype = 'advisory' AND granted"
	if k == testdb.MariaDB {
		q = "SELECT count(DISTINCT THREAD_ID) FROM information_schema.METADATA_LOCK_INFO WHERE LOCK_TYPE = 'User lock'"
	}
	var n int
	if err := testdb.AdminDB(t, k).QueryRow(q).Scan(&n); err != nil {
		t.Fatalf("count holders: %v", err)
	}
	return n
}

func contender(t *testing.T, name string) bench.Contender {
	t.Helper()
	for _, c := range bench.Contenders() {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no contender %s", name)
	return bench.Contender{}
}

func infoInt(info, field string) int {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return -1
}
