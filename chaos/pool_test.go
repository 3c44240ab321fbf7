package chaos_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// openSmall opens a pool of at most n connections on the shared server of
// kind k, with the leak check registered.
func openSmall(t *testing.T, k testdb.Kind, n int) (*gorm.DB, *sql.DB) {
	t.Helper()
	db, sqlDB := openGorm(t, k)
	sqlDB.SetMaxOpenConns(n)
	return db, sqlDB
}

// TestSmallPools runs many callers on pools of MaxOpenConns 1 and 2.
//
//   - fn that uses only its transaction: no deadlock. Try-once callers get
//     the lock or ErrNotAcquired; with WithWait every caller gets its turn.
//   - fn that also uses the outer db (a second connection) on a pool that
//     has none to spare: the query waits for a connection until the
//     caller's context ends, and the verb returns the context's error, with
//     fn's work rolled back and the lock released. With a context that never
//     ends it would wait forever: database/sql has no pool timeout. The
//     documented rule (gormlock's "Pool sizing"): Transaction holds one
//     connection and Session one (the lock connection) while fn runs; give
//     the pool one more per concurrent caller whose fn uses the outer db,
//     and give calls a deadline.
func TestSmallPools(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		d := k.Dialect()
		admin := testdb.AdminDB(t, k)
		work := workTable(t, admin, admin)

		t.Run("max1-tx-only", func(t *testing.T) {
			db, _ := openSmall(t, k, 1)
			key := "chaos-pool1-" + string(k)
			for _, wait := range []time.Duration{0, 5 * time.Second} {
				var (
					in      testdb.Holders
					mu      sync.Mutex
					results = map[string]int{}
					wg      sync.WaitGroup
				)
				const callers, each = 8, 10
				start := time.Now()
				for c := range callers {
					wg.Go(func() {
						for range each {
							ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
							err := gormlock.Transaction(db.WithContext(ctx), key, func(tx *gorm.DB) error {
								defer in.Enter()()
								return tx.Exec("INSERT INTO "+work+" (slot, who) VALUES (?, ?)", key, fmt.Sprint(c)).Error
							}, ormlock.WithWait(wait))
							cancel()
							mu.Lock()
							results[outcome(err)]++
							if o := outcome(err); o != "ok" && o != "not_acquired" {
								t.Errorf("caller %d: %v", c, err)
							}
							mu.Unlock()
						}
					})
				}
				wg.Wait()
				took := time.Since(start)
				t.Logf("figure: MaxOpenConns 1, %d callers x %d Transaction (fn uses tx only), wait %v on %s: %v in %v, max inside fn %d",
					callers, each, wait, k, results, took.Round(time.Millisecond), in.Max())
				if in.Max() > 1 {
					t.Errorf("%d holders inside fn at once", in.Max())
				}
				if wait > 0 && results["ok"] != callers*each {
					t.Errorf("with WithWait(%v): %v, want every call to succeed", wait, results)
				}
			}
		})

		// fn uses the outer db on a pool with no connection to spare
		for _, verb := range []string{"transaction", "session", "runonce-claim"} {
			t.Run("max1-outer-db-"+verb, func(t *testing.T) {
				db, sqlDB := openSmall(t, k, 1)
				var led string
				if verb == "runonce-claim" {
					sqlDB.SetMaxOpenConns(2)
					led = ledgerTable(t, db, admin)
					sqlDB.SetMaxOpenConns(1)
				}
				key := "chaos-pool1-outer-" + verb + "-" + string(k)
				for _, how := range []string{"deadline", "cancel"} {
					const limit = 500 * time.Millisecond
					var ctx context.Context
					var cancel context.CancelFunc
					if how == "deadline" {
						ctx, cancel = context.WithTimeout(context.Background(), limit)
					} else {
						ctx, cancel = context.WithCancel(context.Background())
						time.AfterFunc(limit, cancel)
					}
					start := time.Now()
					var err error
					switch verb {
					case "transaction":
						err = gormlock.Transaction(db.WithContext(ctx), key, func(tx *gorm.DB) error {
							if err := tx.Exec("INSERT INTO "+work+" (slot, who) VALUES (?, ?)", key, how).Error; err != nil {
								return err
							}
							return db.WithContext(ctx).Exec("SELECT 1").Error // needs a second connection
						})
					case "session":
						err = gormlock.Session(db.WithContext(ctx), key, func(ctx context.Context) error {
							return db.WithContext(ctx).Exec("SELECT 1").Error
						})
					default:
						slot := time.Date(2034, 4, 4, 0, 0, 0, 0, time.UTC)
						err = gormlock.RunOnce(db.WithContext(ctx), key, slot, func(tx *gorm.DB) error {
							return tx.Exec("SELECT 1").Error
						}, ormlock.WithClaim(), ormlock.WithLedgerTable(led))
					}
					took := time.Since(start)
					cancel()
					want := context.DeadlineExceeded
					if how == "cancel" {
						want = context.Canceled
					}
					t.Logf("figure: MaxOpenConns 1, %s whose fn needs a second connection, context %s after %v on %s: returned after %v: %v",
						verb, how, limit, k, took.Round(time.Millisecond), err)
					if !errors.Is(err, want) {
						t.Errorf("%s: %v, want %v", how, err, want)
					}
					if took > limit+15*time.Second {
						t.Errorf("%s: returned %v after the start, context ended at %v", how, took, limit)
					}
					mustFree(t, d, admin, named(key))
				}
				if n := countRows(t, d, admin, work, "slot = ?", key); n != 0 {
					t.Errorf("%d row(s) of the timed-out transactions committed", n)
				}
			})
		}

		t.Run("max2-outer-db", func(t *testing.T) {
			db, _ := openSmall(t, k, 2)
			for _, shared := range []bool{true, false} {
				const callers = 6
				const limit = 500 * time.Millisecond
				var (
					mu      sync.Mutex
					results = map[string]int{}
					worst   time.Duration
					wg      sync.WaitGroup
				)
				start := time.Now()
				for c := range callers {
					key := "chaos-pool2-shared-" + string(k)
					if !shared {
						key = fmt.Sprintf("chaos-pool2-own-%s-%d", k, c)
					}
					wg.Go(func() {
						ctx, cancel := context.WithTimeout(context.Background(), limit)
						defer cancel()
						t0 := time.Now()
						err := gormlock.Transaction(db.WithContext(ctx), key, func(tx *gorm.DB) error {
							if err := tx.Exec("SELECT 1").Error; err != nil {
								return err
							}
							return db.WithContext(ctx).Exec("SELECT 1").Error
						})
						took := time.Since(t0)
						mu.Lock()
						defer mu.Unlock()
						worst = max(worst, took)
						o := outcome(err)
						if o == "other" && errors.Is(err, driver.ErrBadConn) && ctx.Err() != nil {
							// fn's own statement, cut by the deadline: pgx closes
							// the connection, and a statement that raced the
							// cancellation reports it as bad; fn's error is
							// returned unchanged
							o = "fn:bad_conn(ctx)"
						}
						if o == "lock_lost" && errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
							// the same cut, seen at ROLLBACK: the statement's
							// connection, closed by pgx, was the lock's, so
							// the lock went with it and the error says so
							// beside the deadline
							o = "lock_lost(ctx)"
						}
						results[o]++
						if o != "ok" && o != "not_acquired" && o != "context" && o != "not_acquired(ctx)" && o != "fn:bad_conn(ctx)" && o != "lock_lost(ctx)" {
							t.Errorf("caller %d: %v", c, err)
						}
					})
				}
				wg.Wait()
				t.Logf("figure: MaxOpenConns 2, %d concurrent Transaction whose fn also uses the outer db, shared key %v, deadline %v on %s: %v, slowest call %v, all in %v",
					callers, shared, limit, k, results, worst.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
				if worst > limit+15*time.Second {
					t.Errorf("a call took %v, its deadline was %v", worst, limit)
				}
			}
		})
	})
}

// A key two replicas wait for, each taking it for a short term again and
// again. A waiter on a shared lock connection (WithSharedLockConns: a
// try-lock repeated with a backoff) against one on a dedicated connection
// (queued on the server, which hands it the lock the moment it is freed)
// wins few terms, if any: mixing the two for a key starves the shared one, as
// docs/PROTOCOL.md (Shared lock connections) says. The remedy it gives,
// every waiter of such a key on a dedicated connection, makes the server's
// queue hand the terms round. Exclusion holds throughout.
func TestSharedWaiterStarves(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			terms := pick(60, 240)
			shared := []ormlock.Option{ormlock.WithSharedLockConns(1), ormlock.WithKeepalive(200 * time.Millisecond)}
			wins := contend(t, k, "starve-mixed-"+string(k), terms, nil, shared)
			t.Logf("dedicated vs shared waiter, %d terms: %v", terms, wins)
			if wins[1] > terms/4 { // measured: 0 to 7 in 100 on loopback
				t.Errorf("the shared waiter won %d of %d terms against a dedicated one; the docs say it starves", wins[1], terms)
			}
			wins = contend(t, k, "starve-dedicated-"+string(k), terms, nil, nil)
			t.Logf("two dedicated waiters, %d terms: %v", terms, wins)
			for i, w := range wins {
				if w < terms/4 {
					t.Errorf("dedicated waiter %d won %d of %d terms; the server's queue should hand them round", i, w, terms)
				}
			}
		})
	}
}

// contend runs two replicas, each on a pool of its own with its options,
// taking key for a term of 10 ms (waiting up to a minute) until terms
// terms were held in all, and returns how many each won.
func contend(t *testing.T, k testdb.Kind, key string, terms int, opts ...[]ormlock.Option) [2]int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		held   atomic.Int64 // terms begun
		inside atomic.Int32
		wins   [2]atomic.Int64
		wg     sync.WaitGroup
		errMu  sync.Mutex
		errs   []error
	)
	for i := range 2 {
		db, _ := openGorm(t, k)
		o := append([]ormlock.Option{ormlock.WithWait(time.Minute)}, opts[i]...)
		wg.Go(func() {
			for ctx.Err() == nil {
				err := gormlock.Session(db.WithContext(ctx), ormlock.Name(key), func(fctx context.Context) error {
					if n := inside.Add(1); n != 1 {
						return fmt.Errorf("%d replicas inside at once", n)
					}
					defer inside.Add(-1)
					wins[i].Add(1)
					if held.Add(1) >= int64(terms) {
						cancel()
					}
					select {
					case <-time.After(10 * time.Millisecond):
					case <-fctx.Done():
					}
					return nil
				}, o...)
				if err != nil && !(ctx.Err() != nil && errors.Is(err, context.Canceled)) {
					errMu.Lock()
					errs = append(errs, fmt.Errorf("replica %d: %w", i, err))
					errMu.Unlock()
					return
				}
			}
		})
	}
	select {
	case <-ctx.Done():
	case <-time.After(2 * time.Minute):
		t.Errorf("%d terms not held within 2 minutes (%d were)", terms, held.Load())
		cancel()
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	return [2]int{int(wins[0].Load()), int(wins[1].Load())}
}
