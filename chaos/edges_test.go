package chaos_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/faults"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent/item"
)

// TestIsolationContention: 3 GORM pools and 1 ent client run the same
// critical section (read the largest n, insert n+1) on one key, try-once
// and with a wait, at REPEATABLE READ and SERIALIZABLE, 40 calls each (400
// under -soak). Asserted: every committed n is distinct and they form
// 1..count: no holder read a snapshot older than the previous holder's
// commit, and no call failed with a serialization error.
func TestIsolationContention(t *testing.T) {
	rounds := pick(40, 400)
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		for _, iso := range []sql.IsolationLevel{sql.LevelRepeatableRead, sql.LevelSerializable} {
			t.Run(iso.String(), func(t *testing.T) {
				admin := testdb.AdminDB(t, k)
				var dbs []*gorm.DB
				for range 3 {
					db, _ := openGorm(t, k)
					dbs = append(dbs, db)
				}
				client, _ := enttest.Open(t, k)
				owner := enttest.Owner(t, k)
				key := "chaos-iso-" + t.Name()
				txo := ormlock.WithTxOptions(&sql.TxOptions{Isolation: iso})
				var (
					mu       sync.Mutex
					won      int
					failures []string
					wg       sync.WaitGroup
				)
				outcome := func(err error) {
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						won++
					case errors.Is(err, ormlock.ErrNotAcquired):
					case len(failures) < 10:
						failures = append(failures, err.Error())
					}
				}
				next := func(read func() (int, error), write func(n int) error) error {
					n, err := read()
					if err != nil {
						return err
					}
					return write(n + 1)
				}
				start := time.Now()
				for i := range 4 {
					wg.Go(func() {
						for r := range rounds {
							opts := []ormlock.Option{txo}
							if r%2 == 1 {
								opts = append(opts, ormlock.WithWait(2*time.Second))
							}
							if i < 3 {
								outcome(gormlock.Transaction(dbs[i], key, func(tx *gorm.DB) error {
									return next(func() (int, error) {
										var n int
										err := tx.Raw("SELECT COALESCE(MAX(n), 0) FROM items WHERE owner = ?", owner).Scan(&n).Error
										return n, err
									}, func(n int) error {
										return tx.Exec("INSERT INTO items (owner, n) VALUES (?, ?)", owner, n).Error
									})
								}, opts...))
								continue
							}
							ctx := context.Background()
							outcome(entlock.Transaction(ctx, client, key, func(tx *ent.Tx) error {
								return next(func() (int, error) {
									items, err := tx.Item.Query().Where(item.Owner(owner)).All(ctx)
									top := 0
									for _, it := range items {
										top = max(top, it.N)
									}
									return top, err
								}, func(n int) error { return tx.Item.Create().SetOwner(owner).SetN(n).Exec(ctx) })
							}, opts...))
						}
					})
				}
				wg.Wait()
				took := time.Since(start)
				for _, f := range failures {
					t.Error(f)
				}
				var total, distinct, top int
				q := "SELECT COUNT(*), COUNT(DISTINCT n), COALESCE(MAX(n), 0) FROM items WHERE owner = ?"
				if k.Dialect() == "postgres" {
					q = dollar(q)
				}
				if err := admin.QueryRow(q, owner).Scan(&total, &distinct, &top); err != nil {
					t.Fatal(err)
				}
				if total != won || distinct != total || top != total {
					t.Fatalf("%d calls returned nil; rows %d, distinct %d, max %d: a holder read a stale snapshot", won, total, distinct, top)
				}
				t.Logf("figure: isolation %s on %s: %d calls (3 GORM pools, 1 ent client; try-once and wait), %d committed, 1..%d each once, 0 serialization failures, in %v",
					iso, k, 4*rounds, won, total, took.Round(time.Millisecond))
			})
		}
	})
}

// TestDeadlineFaults: calls with a deadline against an exhausted pool
// (MaxOpenConns 1, its connection held elsewhere; every server), a frozen
// idle backend (SIGSTOP before the call; PostgreSQL) and a backend frozen
// while fn runs (PostgreSQL and PgBouncer: the COMMIT is cut at the
// deadline). Asserted: each call returns within its deadline + 2 s; before
// the lock the error matches ErrNotAcquired and DeadlineExceeded, after it
// DeadlineExceeded; afterwards no lock is held and no connection in use.
// 3 rounds per case (20 under -soak).
func TestDeadlineFaults(t *testing.T) {
	rounds := pick(3, 20)
	const deadline = 500 * time.Millisecond
	call := func(t *testing.T, db *gorm.DB, key string, fn func(tx *gorm.DB) error, opts ...ormlock.Option) (time.Duration, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		start := time.Now()
		err := gormlock.Transaction(db.WithContext(ctx), key, fn, opts...)
		took := time.Since(start)
		if took > deadline+2*time.Second {
			t.Errorf("returned after %v, deadline %v", took, deadline)
		}
		return took, err
	}
	nop := func(*gorm.DB) error { return nil }
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		t.Run("PoolExhausted", func(t *testing.T) {
			db, sqlDB := openGorm(t, k)
			sqlDB.SetMaxOpenConns(1)
			conn, err := sqlDB.Conn(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			var took stats
			for r := range rounds {
				d, err := call(t, db, fmt.Sprint("chaos-pool-", k, r), nop, ormlock.WithWait(time.Minute))
				took = append(took, d)
				if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("round %d: %v", r, err)
				}
			}
			t.Logf("figure: exhausted pool on %s, deadline %v -> ErrNotAcquired+DeadlineExceeded after %v", k, deadline, took)
		})
		if k.Dialect() != "postgres" {
			return // freezing one backend needs a process per connection
		}
		if k == testdb.Postgres {
			t.Run("FrozenIdleBackend", func(t *testing.T) {
				db, sqlDB := openGorm(t, k)
				sqlDB.SetMaxIdleConns(1)
				var took stats
				for r := range rounds {
					resume := faults.Freeze(t, faults.PGBackendPID(t, sqlDB))
					d, err := call(t, db, fmt.Sprint("chaos-frozen-idle-", r), nop)
					resume()
					took = append(took, d)
					if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("round %d: %v", r, err)
					}
				}
				t.Logf("figure: frozen idle backend on %s, deadline %v -> ErrNotAcquired+DeadlineExceeded after %v", k, deadline, took)
			})
		}
		for _, iso := range []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelRepeatableRead} {
			t.Run("FrozenDuringFn/"+iso.String(), func(t *testing.T) {
				db, _ := openGorm(t, k)
				var took stats
				for r := range rounds {
					var resume func()
					d, err := call(t, db, fmt.Sprint("chaos-frozen-fn-", k, iso, r), func(tx *gorm.DB) error {
						var pid int
						if err := tx.Raw("SELECT pg_backend_pid()").Scan(&pid).Error; err != nil {
							return err
						}
						resume = faults.Freeze(t, pid)
						return nil
					}, ormlock.WithTxOptions(&sql.TxOptions{Isolation: iso}))
					if resume != nil {
						resume()
					}
					took = append(took, d)
					if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ormlock.ErrNotAcquired) {
						t.Errorf("round %d: %v, want DeadlineExceeded after the lock", r, err)
					}
				}
				t.Logf("figure: backend frozen during fn on %s (%s), deadline %v -> COMMIT cut, DeadlineExceeded after %v", k, iso, deadline, took)
			})
		}
	})
}
