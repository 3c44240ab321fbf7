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

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
	"github.com/ormlock/ormlock/pgxlock"
	"github.com/ormlock/ormlock/sqllock"
)

// Rate limits (ormlock.Rate) on every adapter and server: never more than
// n tokens per interval, counting open holders, across two pools (two
// replicas); a rollback gives its token back; holders of one key never
// wait for one another; every other verb refuses a Rate.

var errRateFn = errors.New("fn failed on purpose")

// rateRunners are two runners of adapter a on two pools of kind k (two
// replicas), the rate table migrated.
func rateRunners(t *testing.T, a adapter, k testdb.Kind) (runner, runner) {
	t.Helper()
	r1, r2 := a.with(t, k), a.with(t, k)
	if err := r1.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return r1, r2
}

func TestConformanceRate(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r1, r2 := rateRunners(t, a, k)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()

		t.Run("never above n", func(t *testing.T) {
			// per is an hour: every take of the test falls in one interval
			const n = 3
			key := ormlock.Rate(uniq(t, "rate")[0], n, time.Hour)
			var committed, refused atomic.Int32
			var wg sync.WaitGroup
			for g := range 8 {
				r := []runner{r1, r2}[g%2]
				wg.Go(func() {
					for range 4 {
						err := r.Transaction(ctx, key, func(tx txn) error {
							time.Sleep(5 * time.Millisecond)
							return nil
						})
						switch {
						case err == nil:
							committed.Add(1)
						case errors.Is(err, ormlock.ErrNotAcquired):
							refused.Add(1)
						default:
							t.Errorf("goroutine %d: %v", g, err)
						}
					}
				})
			}
			wg.Wait()
			if c := committed.Load(); c != n {
				t.Fatalf("%d transactions committed in one interval of Rate(n=%d), want exactly %d", c, n, n)
			}
			if refused.Load() != 32-n {
				t.Errorf("%d refused, want %d", refused.Load(), 32-n)
			}
		})

		t.Run("open holders count", func(t *testing.T) {
			// n=2: two holders inside fn at once (neither blocks the
			// other), and a third refused while both are still open
			key := ormlock.Rate(uniq(t, "open")[0], 2, time.Hour)
			in1, in2, out := make(chan struct{}), make(chan struct{}), make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				if err := r1.Transaction(ctx, key, func(tx txn) error {
					close(in1)
					<-out
					return nil
				}); err != nil {
					t.Errorf("holder 1: %v", err)
				}
			})
			<-in1
			wg.Go(func() {
				if err := r2.Transaction(ctx, key, func(tx txn) error {
					close(in2)
					<-out
					return nil
				}); err != nil {
					t.Errorf("holder 2: %v", err)
				}
			})
			select {
			case <-in2:
			case <-time.After(20 * time.Second):
				t.Error("the second holder did not get into fn while the first was inside")
			}
			err := r1.Transaction(ctx, key, func(tx txn) error {
				t.Error("fn ran with both tokens held by open transactions")
				return nil
			})
			if !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Errorf("third holder: %v, want ErrNotAcquired", err)
			}
			close(out)
			wg.Wait()
			err = r2.Transaction(ctx, key, func(tx txn) error { return nil })
			if !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Errorf("after two commits: %v, want ErrNotAcquired", err)
			}
			if d, ok := ormlock.RetryAfter(err); !ok || d <= 50*time.Minute || d > time.Hour {
				t.Errorf("RetryAfter = %v, %v; want about an hour", d, ok)
			}
		})

		t.Run("rollback refunds", func(t *testing.T) {
			key := ormlock.Rate(uniq(t, "refund")[0], 1, time.Hour)
			err := r1.Transaction(ctx, key, func(tx txn) error { return errRateFn })
			if !errors.Is(err, errRateFn) {
				t.Fatalf("rolled-back holder: %v", err)
			}
			func() {
				defer func() { _ = recover() }()
				_ = r2.Transaction(ctx, key, func(tx txn) error { panic("fn panics") })
			}()
			ran := false
			if err := r2.Transaction(ctx, key, func(tx txn) error { ran = true; return nil }); err != nil || !ran {
				t.Fatalf("after a rollback and a panic the token should be free: %v (ran %v)", err, ran)
			}
			err = r1.Transaction(ctx, key, func(tx txn) error { return nil })
			if !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Fatalf("second commit in one interval of n=1: %v, want ErrNotAcquired", err)
			}
		})

		t.Run("wait", func(t *testing.T) {
			// per = 1 s, n = 2, takes with a wait for 1.5 s: never more
			// than n per started interval of per, and the waits get the
			// tokens of the next interval
			const n = 2
			key := ormlock.Rate(uniq(t, "wait")[0], n, time.Second)
			start := time.Now()
			var committed atomic.Int32
			var wg sync.WaitGroup
			for g := range 4 {
				r := []runner{r1, r2}[g%2]
				wg.Go(func() {
					for time.Since(start) < 1500*time.Millisecond {
						err := r.Transaction(ctx, key, func(tx txn) error { return nil }, ormlock.WithWait(time.Second))
						switch {
						case err == nil:
							committed.Add(1)
						case errors.Is(err, ormlock.ErrNotAcquired):
						default:
							t.Errorf("goroutine %d: %v", g, err)
							return
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			most := int32(n * (int(elapsed/time.Second) + 1))
			if c := committed.Load(); c > most || c <= n {
				t.Errorf("%d commits in %v with Rate(%d per 1s): want %d to %d", c, elapsed, n, n+1, most)
			}
		})

		t.Run("usage and prune", func(t *testing.T) {
			name := uniq(t, "usage")[0]
			key := ormlock.Rate(name, 3, time.Hour)
			if err := r1.Transaction(ctx, key, func(tx txn) error { return nil }); err != nil {
				t.Fatal(err)
			}
			u, err := usage(ctx, r2, key)
			if err != nil {
				t.Fatal(err)
			}
			if u.N != 3 || u.Used != 1 || u.Free != 2 || u.Per != time.Hour || u.NextFree.Sub(u.Now) <= 50*time.Minute {
				t.Errorf("Usage = %+v, want 1 of 3 used for about an hour", u)
			}
			rows := func() int64 {
				var n int64
				q := "SELECT count(*) FROM ormlock_rate_tokens WHERE rkey = $1"
				if k.Dialect() == "mysql" {
					q = "SELECT count(*) FROM ormlock_rate_tokens WHERE rkey = ?"
				}
				if err := r1.Pool().QueryRowContext(ctx, q, keyhash.MySQLName("", name)).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			if n := rows(); n != 3 {
				t.Fatalf("%d token rows, want 3", n)
			}
			// the two tokens never used have been free since the epoch:
			// Prune deletes them, keeps the one in use
			if _, err := r1.Prune(ctx, time.Minute); err != nil {
				t.Fatal(err)
			}
			if n := rows(); n != 1 {
				t.Fatalf("%d token rows after Prune, want 1 (the one in use)", n)
			}
			// a take refills them, and the limit still counts the use
			for range 2 {
				if err := r2.Transaction(ctx, key, func(tx txn) error { return nil }); err != nil {
					t.Fatalf("after Prune: %v", err)
				}
			}
			if err := r2.Transaction(ctx, key, func(tx txn) error { return nil }); !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Fatalf("fourth take of Rate(3 per 1h) after Prune: %v, want ErrNotAcquired", err)
			}
			if _, err := usage(ctx, r1, ormlock.Key(ormlock.Name(name))); !errors.Is(err, ormlock.ErrInvalidArgument) {
				t.Errorf("Usage of a plain key: %v, want ErrInvalidArgument", err)
			}
		})

		for _, level := range []sql.IsolationLevel{sql.LevelRepeatableRead, sql.LevelSerializable} {
			t.Run(level.String(), func(t *testing.T) {
				txo := ormlock.WithTxOptions(&sql.TxOptions{Isolation: level})
				// never above n, and no error but a refusal (PostgreSQL's
				// SERIALIZABLE may fail a COMMIT with 40001, as it may any
				// two transactions that touch one row)
				const n = 2
				key := ormlock.Rate(uniq(t, "iso")[0], n, time.Hour)
				var committed atomic.Int32
				var wg sync.WaitGroup
				for g := range 6 {
					r := []runner{r1, r2}[g%2]
					wg.Go(func() {
						for range 3 {
							err := r.Transaction(ctx, key, func(tx txn) error { return nil }, txo)
							switch {
							case err == nil:
								committed.Add(1)
							case errors.Is(err, ormlock.ErrNotAcquired):
							case level == sql.LevelSerializable && k.Dialect() == "postgres" && strings.Contains(err.Error(), "40001"):
							default:
								t.Errorf("goroutine %d: %v", g, err)
							}
						}
					})
				}
				wg.Wait()
				if c := committed.Load(); c > n || c == 0 {
					t.Errorf("%d committed in one interval of Rate(n=%d) at %s", c, n, level)
				}
				// an open holder never makes another wait: refused at once
				one := ormlock.Rate(uniq(t, "isoopen")[0], 1, time.Hour)
				in, out := make(chan struct{}), make(chan struct{})
				wg.Go(func() {
					if err := r1.Transaction(ctx, one, func(tx txn) error {
						close(in)
						<-out
						return nil
					}, txo); err != nil {
						t.Errorf("holder: %v", err)
					}
				})
				<-in
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err := r2.Transaction(cctx, one, func(tx txn) error { return nil }, txo)
				cancel()
				if !errors.Is(err, ormlock.ErrNotAcquired) || errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("second holder while the first is open: %v, want a refusal at once", err)
				}
				close(out)
				wg.Wait()
			})
		}

		t.Run("refused elsewhere", func(t *testing.T) {
			key := ormlock.Rate(uniq(t, "verbs")[0], 5, time.Minute)
			if err := r1.Session(ctx, key, func(context.Context) error { return nil }); !errors.Is(err, ormlock.ErrInvalidArgument) {
				t.Errorf("Session: %v, want ErrInvalidArgument", err)
			}
			if _, err := r1.Holder(ctx, key); !errors.Is(err, ormlock.ErrInvalidArgument) {
				t.Errorf("Holder: %v, want ErrInvalidArgument", err)
			}
			if err := lead(ctx, r1, key, func(context.Context) error { return nil }); !errors.Is(err, ormlock.ErrInvalidArgument) {
				t.Errorf("Lead: %v, want ErrInvalidArgument", err)
			}
			if err := r1.Transaction(ctx, key, func(txn) error { return nil }, ormlock.WithFencing()); !errors.Is(err, ormlock.ErrInvalidArgument) {
				t.Errorf("Transaction WithFencing: %v, want ErrInvalidArgument", err)
			}
			if g, ok := r1.(gormLocker); ok {
				// inside the caller's transaction: the token is that
				// transaction's, given back by a ROLLBACK TO the savepoint
				// around fn (fn failed) or by the caller's ROLLBACK
				nestedKey := ormlock.Rate(uniq(t, "nested")[0], 1, time.Hour)
				err := g.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
					if err := gormlock.Transaction(tx, nestedKey, func(*gorm.DB) error { return errRateFn }); !errors.Is(err, errRateFn) {
						t.Errorf("nested, fn failed: %v", err)
					}
					return gormlock.Transaction(tx, nestedKey, func(*gorm.DB) error { return nil })
				})
				if err != nil {
					t.Fatalf("nested Transaction of a Rate after a refunded one: %v", err)
				}
				if err := r2.Transaction(ctx, nestedKey, func(tx txn) error { return nil }); !errors.Is(err, ormlock.ErrNotAcquired) {
					t.Errorf("after the caller committed a nested token: %v, want ErrNotAcquired", err)
				}
				rolled := ormlock.Rate(uniq(t, "nestedrb")[0], 1, time.Hour)
				err = g.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
					if err := gormlock.Transaction(tx, rolled, func(*gorm.DB) error { return nil }); err != nil {
						t.Errorf("nested: %v", err)
					}
					return errRateFn // the caller rolls back
				})
				if !errors.Is(err, errRateFn) {
					t.Fatal(err)
				}
				if err := r2.Transaction(ctx, rolled, func(tx txn) error { return nil }); err != nil {
					t.Errorf("after the caller rolled back a nested token: %v, want the token free", err)
				}
			}
			name := uniq(t, "bad")[0]
			for _, bad := range []ormlock.Key{
				ormlock.Rate(name, 0, time.Minute),
				ormlock.Rate(name, 10001, time.Minute),
				ormlock.Rate(name, 1, 999*time.Millisecond),
				ormlock.Rate(name, 1, 8*24*time.Hour),
				ormlock.Rate("", 1, time.Minute),
				ormlock.All(ormlock.Name(name), ormlock.Rate(name+"2", 1, time.Minute)),
				ormlock.Shared(ormlock.Rate(name, 1, time.Minute)),
				ormlock.Semaphore(ormlock.Rate(name, 1, time.Minute), 2),
				ormlock.Rate(ormlock.Semaphore(name, 2), 1, time.Minute),
			} {
				err := r1.Transaction(ctx, bad, func(txn) error {
					t.Errorf("fn ran for %s", bad)
					return nil
				})
				if !errors.Is(err, ormlock.ErrInvalidKey) {
					t.Errorf("%s: %v, want ErrInvalidKey", bad, err)
				}
			}
		})
	})
}

func usage(ctx context.Context, r runner, key ormlock.Key, opts ...ormlock.Option) (ormlock.RateUsage, error) {
	switch l := r.(type) {
	case gormLocker:
		return gormlock.Usage(l.db.WithContext(ctx), key, opts...)
	case entLocker:
		return entlock.Usage(ctx, l.client, key, opts...)
	case sqlLocker:
		return sqllock.Usage(ctx, l.db, key, append(l.opts, opts...)...)
	case pgxLocker:
		return pgxlock.Usage(ctx, l.pools.pool(), key, append(l.opts, opts...)...)
	}
	panic(fmt.Sprintf("usage of %T", r))
}
