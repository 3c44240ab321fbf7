package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
	"github.com/ormlock/ormlock/pgxlock"
	"github.com/ormlock/ormlock/sqllock"
)

// The lock shapes (ormlock.All, Shared, Semaphore) as the key of
// Transaction and Session, on every adapter and server.

// shapeVerbs runs f with each verb of l that takes a shape: Transaction,
// Session, and Session on shared lock connections (not behind PgBouncer,
// which refuses them).
func shapeVerbs(t *testing.T, k testdb.Kind, l locker, f func(t *testing.T, run func(ctx context.Context, key ormlock.Key, fn func(ctx context.Context) error, opts ...ormlock.Option) error)) {
	t.Run("Transaction", func(t *testing.T) {
		f(t, func(ctx context.Context, key ormlock.Key, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
			return l.Transaction(ctx, key, func(tx txn) error { return fn(tx.Context()) }, opts...)
		})
	})
	t.Run("Session", func(t *testing.T) {
		f(t, func(ctx context.Context, key ormlock.Key, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
			return l.Session(ctx, key, fn, opts...)
		})
	})
	if k == testdb.PgBouncer {
		return
	}
	t.Run("SharedConns", func(t *testing.T) {
		f(t, func(ctx context.Context, key ormlock.Key, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
			return l.Session(ctx, key, fn, append([]ormlock.Option{ormlock.WithSharedLockConns(2)}, opts...)...)
		})
	})
}

// uniq names keys of one test case.
func uniq(t *testing.T, names ...string) []string {
	out := make([]string, len(names))
	base := fmt.Sprintf("shape-%d-%s", time.Now().UnixNano(), t.Name())
	for i, n := range names {
		out[i] = base + "/" + n
	}
	return out
}

func TestConformanceAll(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		shapeVerbs(t, k, a.open(t, k), func(t *testing.T, run func(context.Context, ormlock.Key, func(context.Context) error, ...ormlock.Option) error) {
			ctx := context.Background()
			ks := uniq(t, "a", "b", "c")
			ran := false
			err := run(ctx, ormlock.All(ks...), func(ctx context.Context) error {
				ran = true
				for _, n := range ks {
					if free(t, k, n) {
						t.Errorf("%s is free while All holds it", n)
					}
				}
				return nil
			})
			if err != nil || !ran {
				t.Fatalf("All: ran %v, err %v", ran, err)
			}
			for _, n := range ks {
				if !free(t, k, n) {
					t.Errorf("%s held after All returned", n)
				}
			}

			// one key held elsewhere: refused, and none of the others left held
			release := testdb.RawHold(t, k, "", ks[1])
			for _, opts := range [][]ormlock.Option{nil, {ormlock.WithWait(200 * time.Millisecond)}} {
				err = run(ctx, ormlock.All(ks[2], ks[1], ks[0]), func(context.Context) error {
					t.Error("fn ran without every key")
					return nil
				}, opts...)
				if !errors.Is(err, ormlock.ErrNotAcquired) {
					t.Fatalf("All with %s held elsewhere (opts %d): %v, want ErrNotAcquired", ks[1], len(opts), err)
				}
				for _, n := range []string{ks[0], ks[2]} {
					if !free(t, k, n) {
						t.Errorf("%s left held by a refused All", n)
					}
				}
			}
			release()
		})
	})
}

// TestConformanceAllNoDeadlock: overlapping sets taken in opposite orders by
// many goroutines, with and without a wait, never deadlock, and each key
// has at most one holder at a time.
func TestConformanceAllNoDeadlock(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		shapeVerbs(t, k, a.open(t, k), func(t *testing.T, run func(context.Context, ormlock.Key, func(context.Context) error, ...ormlock.Option) error) {
			ks := uniq(t, "p", "q", "r", "s")
			sets := [][]string{{ks[0], ks[1], ks[2]}, {ks[2], ks[1], ks[0]}, {ks[3], ks[0]}, {ks[1], ks[3]}, {ks[2], ks[3], ks[0]}}
			var inside [4]atomic.Int32
			index := map[string]int{ks[0]: 0, ks[1]: 1, ks[2]: 2, ks[3]: 3}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			var won atomic.Int32
			for g := range 6 {
				wg.Go(func() {
					for round := range 8 {
						set := sets[(g+round)%len(sets)]
						var opts []ormlock.Option
						if g%2 == 0 {
							opts = append(opts, ormlock.WithWait(5*time.Second))
						}
						err := run(ctx, ormlock.All(set...), func(context.Context) error {
							for _, n := range set {
								if v := inside[index[n]].Add(1); v > 1 {
									t.Errorf("%s has %d holders", n, v)
								}
							}
							time.Sleep(2 * time.Millisecond)
							for _, n := range set {
								inside[index[n]].Add(-1)
							}
							return nil
						}, opts...)
						switch {
						case err == nil:
							won.Add(1)
						case errors.Is(err, ormlock.ErrNotAcquired) && len(opts) == 0:
						default:
							t.Errorf("goroutine %d round %d: %v", g, round, err)
						}
					}
				})
			}
			wg.Wait()
			if ctx.Err() != nil {
				t.Fatal("the goroutines did not finish within 60 s: a deadlock")
			}
			if won.Load() == 0 {
				t.Fatal("no All won")
			}
			for _, n := range ks {
				if !free(t, k, n) {
					t.Errorf("%s left held", n)
				}
			}
		})
	})
}

func TestConformanceShapeRefused(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		l := a.with(t, k)
		ctx := context.Background()
		ks := uniq(t, "a", "b")
		dup := ormlock.All(ks[0], ks[0])
		if k.Dialect() == "mysql" {
			dup = ormlock.All(ormlock.ID(42), ormlock.Name("42")) // one GET_LOCK name
		}
		caseDup := ormlock.All("Shape-Case", "shape-case")
		fn := func(tx txn) error { t.Error("fn ran"); return nil }
		for name, c := range map[string]struct {
			key  ormlock.Key
			opts []ormlock.Option
			want error
		}{
			"empty set":           {ormlock.All[string](), nil, ormlock.ErrInvalidKey},
			"duplicate":           {dup, nil, ormlock.ErrInvalidKey},
			"semaphore n 0":       {ormlock.Semaphore(ks[0], 0), nil, ormlock.ErrInvalidKey},
			"semaphore n 129":     {ormlock.Semaphore(ks[0], 129), nil, ormlock.ErrInvalidKey},
			"semaphore in All":    {ormlock.All(ormlock.Name(ks[0]), ormlock.Semaphore(ks[1], 2)), nil, ormlock.ErrInvalidKey},
			"semaphore of Shared": {ormlock.Semaphore(ormlock.Shared(ks[0]), 2), nil, ormlock.ErrInvalidKey},
			"bad element":         {ormlock.All(ks[0], ""), nil, ormlock.ErrInvalidKey},
			"fencing":             {ormlock.All(ks[0], ks[1]), []ormlock.Option{ormlock.WithFencing()}, ormlock.ErrInvalidArgument},
			"fencing semaphore":   {ormlock.Semaphore(ks[0], 2), []ormlock.Option{ormlock.WithFencing()}, ormlock.ErrInvalidArgument},
		} {
			t.Run(name, func(t *testing.T) {
				err := l.Transaction(ctx, c.key, fn, c.opts...)
				if !errors.Is(err, c.want) {
					t.Errorf("Transaction: %v, want %v", err, c.want)
				}
				err = l.Session(ctx, c.key, func(context.Context) error { t.Error("fn ran"); return nil }, c.opts...)
				if !errors.Is(err, c.want) {
					t.Errorf("Session: %v, want %v", err, c.want)
				}
			})
		}
		t.Run("case", func(t *testing.T) {
			err := l.Transaction(ctx, caseDup, func(tx txn) error { return nil })
			if k.Dialect() == "mysql" && !errors.Is(err, ormlock.ErrInvalidKey) {
				t.Errorf("names equal but for case on MySQL: %v, want ErrInvalidKey", err)
			}
			if k.Dialect() == "postgres" && err != nil {
				t.Errorf("names differing in case on PostgreSQL: %v", err)
			}
		})
		t.Run("Holder", func(t *testing.T) {
			for _, key := range []ormlock.Key{ormlock.All(ks[0], ks[1]), ormlock.Semaphore(ks[0], 3)} {
				if _, err := l.Holder(ctx, key); !errors.Is(err, ormlock.ErrInvalidArgument) {
					t.Errorf("Holder(%s): %v, want ErrInvalidArgument", key, err)
				}
			}
		})
		t.Run("Shared", func(t *testing.T) {
			err := l.Transaction(ctx, ormlock.Shared(ks[0]), func(tx txn) error { return nil })
			if k.Dialect() == "mysql" {
				if !errors.Is(err, ormlock.ErrUnsupportedDialect) {
					t.Errorf("Shared on MySQL/MariaDB: %v, want ErrUnsupportedDialect", err)
				}
				if !free(t, k, ks[0]) {
					t.Error("a refused Shared left its key held")
				}
				return
			}
			if err != nil {
				t.Errorf("Shared on PostgreSQL: %v", err)
			}
		})
	})
}

// pgTryRaw tries key name's lock with hand-written SQL on PostgreSQL, in
// share mode or not, and releases it; it reports whether it was granted.
func pgTryRaw(t *testing.T, k testdb.Kind, name string, shared bool) bool {
	t.Helper()
	fn := "pg_try_advisory_xact_lock"
	if shared {
		fn += "_shared"
	}
	tx, err := testdb.AdminDB(t, k).Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var ok bool
	if err := tx.QueryRow("SELECT "+fn+"($1)", keyhash.Int64NS("", name)).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestConformanceShared(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, a adapter, k testdb.Kind) {
		shapeVerbs(t, k, a.open(t, k), func(t *testing.T, run func(context.Context, ormlock.Key, func(context.Context) error, ...ormlock.Option) error) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			name := uniq(t, "s")[0]
			// two Shared holders at once, raw shared meets them, exclusive refused
			var both sync.WaitGroup
			both.Add(2)
			errc := make(chan error, 2)
			for range 2 {
				go func() {
					errc <- run(ctx, ormlock.Shared(name), func(context.Context) error {
						both.Done()
						both.Wait()
						if !pgTryRaw(t, k, name, true) {
							t.Error("raw shared lock refused while Shared holders hold")
						}
						if pgTryRaw(t, k, name, false) {
							t.Error("raw exclusive lock granted while Shared holders hold")
						}
						if err := run(ctx, ormlock.Name(name), func(context.Context) error { return nil }); !errors.Is(err, ormlock.ErrNotAcquired) {
							t.Errorf("exclusive while shared: %v, want ErrNotAcquired", err)
						}
						return nil
					})
				}()
			}
			for range 2 {
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
			}
			// an exclusive holder refuses Shared
			release := testdb.RawHold(t, k, "", name)
			if err := run(ctx, ormlock.Shared(name), func(context.Context) error { return nil }); !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Errorf("Shared while held exclusively: %v, want ErrNotAcquired", err)
			}
			release()
			if !free(t, k, name) {
				t.Error("key held after the Shared holders returned")
			}
			// All of Shared and exclusive keys
			other := uniq(t, "x")[0]
			err := run(ctx, ormlock.All(ormlock.Shared(name), ormlock.Name(other)), func(context.Context) error {
				if !pgTryRaw(t, k, name, true) || pgTryRaw(t, k, other, true) {
					t.Error("All(Shared(a), b): a must be shared, b exclusive")
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	})
}

// TestConformanceSemaphore: n+1 racing for a limit of n never have more than
// n in fn, and one holder holds one slot.
func TestConformanceSemaphore(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		l := a.open(t, k)
		shapeVerbs(t, k, l, func(t *testing.T, run func(context.Context, ormlock.Key, func(context.Context) error, ...ormlock.Option) error) {
			const n = 3
			name := uniq(t, "sem")[0]
			key := ormlock.Semaphore(name, n)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var inside, most atomic.Int32
			var wg sync.WaitGroup
			var won atomic.Int32
			for g := range n + 1 {
				wg.Go(func() {
					for range 6 {
						var opts []ormlock.Option
						if g%2 == 0 {
							opts = append(opts, ormlock.WithWait(10*time.Second))
						}
						err := run(ctx, key, func(context.Context) error {
							v := inside.Add(1)
							for m := most.Load(); v > m && !most.CompareAndSwap(m, v); m = most.Load() {
							}
							time.Sleep(20 * time.Millisecond)
							inside.Add(-1)
							return nil
						}, opts...)
						switch {
						case err == nil:
							won.Add(1)
						case errors.Is(err, ormlock.ErrNotAcquired) && len(opts) == 0:
						default:
							t.Errorf("goroutine %d: %v", g, err)
						}
					}
				})
			}
			wg.Wait()
			if m := most.Load(); m > n {
				t.Fatalf("%d holders in fn at once, limit %d", m, n)
			}
			if won.Load() < 6 {
				t.Errorf("only %d acquisitions won", won.Load())
			}
			for i := 1; i <= n; i++ {
				if slot := "ormlock.semaphore:" + name + "#" + fmt.Sprint(i); !free(t, k, slot) {
					t.Errorf("slot %d left held", i)
				}
			}
		})
		t.Run("raw slots", func(t *testing.T) {
			// slots are plain names: raw SQL holding some leaves the others
			name := uniq(t, "raw")[0]
			slot := func(i int) string { return "ormlock.semaphore:" + name + "#" + fmt.Sprint(i) }
			r1, r2 := testdb.RawHold(t, k, "", slot(1)), testdb.RawHold(t, k, "", slot(2))
			err := l.Transaction(context.Background(), ormlock.Semaphore(name, 3), func(tx txn) error {
				if free(t, k, slot(3)) {
					t.Error("the one free slot is not the one taken")
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			r3 := testdb.RawHold(t, k, "", slot(3))
			err = l.Transaction(context.Background(), ormlock.Semaphore(name, 3), func(tx txn) error {
				t.Error("fn ran with every slot held")
				return nil
			})
			if !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Errorf("every slot held by raw SQL: %v, want ErrNotAcquired", err)
			}
			r1()
			r2()
			r3()
		})
		t.Run("one slot", func(t *testing.T) {
			name := uniq(t, "one")[0]
			err := l.Transaction(context.Background(), ormlock.Semaphore(name, 5), func(tx txn) error {
				held := 0
				for i := 1; i <= 5; i++ {
					if !free(t, k, "ormlock.semaphore:"+name+"#"+fmt.Sprint(i)) {
						held++
					}
				}
				if held != 1 {
					t.Errorf("%d slots held by one holder, want 1", held)
				}
				if k.Dialect() == "postgres" && k != testdb.PgBouncer {
					n, err := queryInt(tx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
					if err != nil || n != 1 {
						t.Errorf("pg_locks: %d advisory locks of this backend (err %v), want 1", n, err)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	})
}

// TestConformanceShapeIsolation: shapes at REPEATABLE READ and SERIALIZABLE
// (PostgreSQL's two-connection path) and at the default.
func TestConformanceShapeIsolation(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		for _, iso := range []sql.IsolationLevel{sql.LevelDefault, sql.LevelRepeatableRead, sql.LevelSerializable} {
			t.Run(iso.String(), func(t *testing.T) {
				l := a.with(t, k, ormlock.WithTxOptions(&sql.TxOptions{Isolation: iso}))
				ks := uniq(t, "a", "b")
				for _, key := range []ormlock.Key{ormlock.All(ks[0], ks[1]), ormlock.Semaphore(ks[0], 2)} {
					err := l.Transaction(context.Background(), key, func(tx txn) error {
						if key == ormlock.All(ks[0], ks[1]) && (free(t, k, ks[0]) || free(t, k, ks[1])) {
							t.Error("a key of the set is free inside fn")
						}
						return tx.Insert(ks[0], 1)
					})
					if err != nil {
						t.Fatalf("%s at %s: %v", key, iso, err)
					}
				}
				if k.Dialect() == "postgres" {
					err := l.Transaction(context.Background(), ormlock.Shared(ks[1]), func(tx txn) error {
						if pgTryRaw(t, k, ks[1], false) {
							t.Error("Shared key free for an exclusive lock inside fn")
						}
						return nil
					})
					if err != nil {
						t.Fatalf("Shared at %s: %v", iso, err)
					}
				}
			})
		}
	})
}

func TestShapeKeyString(t *testing.T) {
	long := make([]ormlock.Key, 60)
	for i := range long {
		long[i] = ormlock.Name(fmt.Sprintf("%0200d", i))
	}
	if s := ormlock.All(long...).String(); len(s) > 300 {
		t.Errorf("String of a 60-key set is %d bytes", len(s))
	}
	if a, b := ormlock.All("a", "b"), ormlock.All("a", "b"); a != b {
		t.Error("equal sets compare unequal")
	}
	if got := ormlock.Semaphore("jobs", 3).String(); got != "semaphore(jobs,3)" {
		t.Errorf("Semaphore String = %q", got)
	}
}

// holders is the adapter's Holders.
func holders(ctx context.Context, r runner, key ormlock.Key) ([]ormlock.HolderInfo, error) {
	switch l := r.(type) {
	case gormLocker:
		return gormlock.Holders(l.db.WithContext(ctx), key)
	case entLocker:
		return entlock.Holders(ctx, l.client, key)
	case sqlLocker:
		return sqllock.Holders(ctx, l.db, key, l.opts...)
	case pgxLocker:
		return pgxlock.Holders(ctx, l.pools.pool(), key, l.opts...)
	}
	panic(fmt.Sprintf("holders of %T", r))
}

// TestConformanceHolders: Holders lists every holder of a shape, each with
// its key, mode and slot; Holder of Shared(k) answers as for k.
func TestConformanceHolders(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := a.with(t, k)
		ctx := context.Background()
		ks := uniq(t, "a", "b")
		err := r.Transaction(ctx, ormlock.All(ks[1], ks[0]), func(txn) error {
			hs, err := holders(ctx, r, ormlock.All(ks[0], ks[1]))
			if err != nil {
				return err
			}
			if len(hs) != 2 || !hs[0].Held || !hs[1].Held || hs[0].PID != hs[1].PID || hs[0].Shared {
				t.Errorf("Holders of a held set: %+v", hs)
			}
			got := map[string]bool{}
			for _, h := range hs {
				got[h.Key] = true
			}
			if !got[ks[0]] || !got[ks[1]] {
				t.Errorf("Holders names keys %v, want %v", got, ks)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if hs, err := holders(ctx, r, ormlock.All(ks[0], ks[1])); err != nil || len(hs) != 0 {
			t.Errorf("Holders of a free set: %v, %v", hs, err)
		}
		err = r.Transaction(ctx, ormlock.Semaphore(ks[0], 4), func(txn) error {
			hs, err := holders(ctx, r, ormlock.Semaphore(ks[0], 4))
			if err != nil {
				return err
			}
			if len(hs) != 1 || hs[0].Slot < 1 || hs[0].Slot > 4 || hs[0].Key != ks[0] {
				t.Errorf("Holders of a semaphore with one holder: %+v", hs)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if k.Dialect() != "postgres" {
			return
		}
		var both, checked sync.WaitGroup
		both.Add(2)
		checked.Add(2)
		errc := make(chan error, 2)
		for range 2 {
			go func() {
				errc <- r.Transaction(ctx, ormlock.Shared(ks[1]), func(txn) error {
					both.Done()
					both.Wait()
					defer func() { checked.Done(); checked.Wait() }()
					hs, err := holders(ctx, r, ormlock.Shared(ks[1]))
					if err == nil && (len(hs) != 2 || !hs[0].Shared || !hs[1].Shared || hs[0].Mode != "ShareLock") {
						t.Errorf("Holders of a key two hold shared: %+v", hs)
					}
					h, herr := r.Holder(ctx, ormlock.Shared(ks[1]))
					if herr == nil && (!h.Held || !h.Shared) {
						t.Errorf("Holder of Shared(k): %+v", h)
					}
					return errors.Join(err, herr)
				})
			}()
		}
		for range 2 {
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		}
	})
}

// lead is the adapter's Lead.
func lead(ctx context.Context, r runner, key ormlock.Key, fn func(context.Context) error, opts ...ormlock.Option) error {
	switch l := r.(type) {
	case gormLocker:
		return gormlock.Lead(l.db.WithContext(ctx), key, fn, opts...)
	case entLocker:
		return entlock.Lead(ctx, l.client, key, fn, opts...)
	case sqlLocker:
		return sqllock.Lead(ctx, l.db, key, fn, append(l.opts, opts...)...)
	case pgxLocker:
		return pgxlock.Lead(ctx, l.pools.pool(), key, fn, append(l.opts, opts...)...)
	}
	panic(fmt.Sprintf("lead of %T", r))
}

func TestConformanceLeadRefusesShapes(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := a.with(t, k)
		ks := uniq(t, "a", "b")
		for _, key := range []ormlock.Key{ormlock.All(ks[0], ks[1]), ormlock.Shared(ks[0]), ormlock.Semaphore(ks[0], 2)} {
			err := lead(context.Background(), r, key, func(context.Context) error { t.Error("fn ran"); return nil })
			if !errors.Is(err, ormlock.ErrInvalidArgument) {
				t.Errorf("Lead(%s): %v, want ErrInvalidArgument", key, err)
			}
		}
	})
}

// TestConformanceAllServerDeadlock: a set whose wait meets raw SQL taking
// the same keys in the other order makes the server's deadlock detector
// pick a victim. The set waits for its first key (held by a third
// connection) while the raw side holds the second and queues for the
// first; once the first is free the set takes it and asks for the second,
// closing the cycle. Whichever side the server refuses, ormlock's outcome
// is exact: ErrNotAcquired wrapping the server's deadlock error, nothing
// left held; or the lock, once the raw side gave up.
func TestConformanceAllServerDeadlock(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		if k == testdb.PgBouncer {
			return // the raw side needs a session-level lock
		}
		l := sqlWith(t, k)
		ks := uniq(t, "a", "b")
		if firstOf(k, ks[0], ks[1]) != ks[0] {
			ks[0], ks[1] = ks[1], ks[0] // a is the set's first key
		}
		ctx := context.Background()
		raw := testdb.Open(t, k)
		if k.Dialect() == "postgres" {
			raw = testdb.AdminDB(t, k)
		}
		conn, err := raw.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		lockSQL := func(n string) string { return fmt.Sprintf("SELECT GET_LOCK('%s', 10) = 1", keyhash.MySQLName("", n)) }
		unlockSQL := func(n string) string { return fmt.Sprintf("SELECT RELEASE_LOCK('%s') = 1", keyhash.MySQLName("", n)) }
		if k.Dialect() == "postgres" {
			lockSQL = func(n string) string {
				return fmt.Sprintf("SELECT pg_advisory_lock(%d) IS NULL", keyhash.Int64NS("", n))
			}
			unlockSQL = func(n string) string { return fmt.Sprintf("SELECT pg_advisory_unlock(%d)", keyhash.Int64NS("", n)) }
		}
		var ok bool
		if err := conn.QueryRowContext(ctx, lockSQL(ks[1])).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		third := testdb.RawHold(t, k, "", ks[0])
		done := make(chan error, 1)
		go func() {
			done <- l.Session(ctx, ormlock.All(ks[1], ks[0]), func(context.Context) error { return nil }, ormlock.WithWait(15*time.Second))
		}()
		time.Sleep(300 * time.Millisecond) // the set waits for a
		rawDone := make(chan error, 1)
		go func() {
			var ok bool
			err := conn.QueryRowContext(ctx, lockSQL(ks[0])).Scan(&ok) // queues for a
			if err == nil && !ok {
				err = errors.New("not granted: the raw side's wait ended")
			}
			rawDone <- err
		}()
		time.Sleep(300 * time.Millisecond)
		third() // a goes to the set, which asks for b: the cycle
		var rawErr error
		select {
		case rawErr = <-rawDone:
			// the raw side is the victim, or took a after ormlock gave up
		case err = <-done:
			rawErr = <-rawDone
			done <- err
		}
		_ = conn.QueryRowContext(ctx, unlockSQL(ks[0])).Scan(new(sql.NullBool))
		_ = conn.QueryRowContext(ctx, unlockSQL(ks[1])).Scan(new(sql.NullBool))
		err = <-done
		t.Logf("raw side: %v; ormlock: %v", rawErr, err)
		switch {
		case err == nil:
			if rawErr == nil {
				t.Error("no deadlock was detected, yet both sides took both keys")
			}
		case errors.Is(err, ormlock.ErrNotAcquired):
			var se interface{ SQLState() string }
			var me *mysql.MySQLError
			if !errors.As(err, &se) && !errors.As(err, &me) {
				t.Errorf("the deadlock refusal does not wrap the server's error: %v", err)
			}
		default:
			t.Errorf("ormlock: %v, want nil or ErrNotAcquired", err)
		}
		for _, n := range ks {
			if !free(t, k, n) {
				t.Errorf("%s left held", n)
			}
		}
	})
}

// firstOf is whichever of names a and b a set takes first on k's server:
// PostgreSQL orders bigint keys by their pg_locks (classid, objid), that
// is as unsigned integers; MySQL/MariaDB by the lock name, case folded.
func firstOf(k testdb.Kind, a, b string) string {
	if k.Dialect() == "postgres" {
		if uint64(keyhash.Int64NS("", a)) <= uint64(keyhash.Int64NS("", b)) {
			return a
		}
		return b
	}
	if strings.ToLower(keyhash.MySQLName("", a)) <= strings.ToLower(keyhash.MySQLName("", b)) {
		return a
	}
	return b
}

// TestConformanceShapeLost: a Session holding a set or a semaphore learns
// of the loss of its connection, on a dedicated lock connection and on a
// shared one; the holder is the one Holders names.
func TestConformanceShapeLost(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := a.with(t, k)
		ks := uniq(t, "a", "b")
		for name, key := range map[string]ormlock.Key{"All": ormlock.All(ks[0], ks[1]), "Semaphore": ormlock.Semaphore(ks[0], 3)} {
			for _, shared := range []bool{false, true} {
				if shared && k == testdb.PgBouncer {
					continue
				}
				t.Run(fmt.Sprintf("%s/shared=%v", name, shared), func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					opts := []ormlock.Option{ormlock.WithKeepalive(200 * time.Millisecond)}
					if shared {
						opts = append(opts, ormlock.WithSharedLockConns(1))
					}
					err := r.Session(ctx, key, func(ctx context.Context) error {
						hs, err := holders(ctx, r, key)
						if err != nil || len(hs) == 0 {
							return fmt.Errorf("Holders: %v %v", hs, err)
						}
						testdb.Kill(t, k, hs[0].PID)
						return awaitLoss(ctx)
					}, opts...)
					if !errors.Is(err, ormlock.ErrLockLost) {
						t.Fatalf("err = %v, want ErrLockLost", err)
					}
				})
			}
		}
	})
}
