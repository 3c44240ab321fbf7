package chaos_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
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
