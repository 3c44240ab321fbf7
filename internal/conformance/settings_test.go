package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	_ "github.com/lib/pq" // a PostgreSQL driver that is not pgx

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
)

// Settings of the user's pool that the protocol meets: a server statement
// timeout shorter than the wait, PostgreSQL's largest lock_timeout, and the
// MySQL driver's DSN variants.

// A server statement timeout (set in the DSN) shorter than the wait, the
// lock held elsewhere: not acquired, with the server's error kept in the
// chain. PgBouncer refuses the startup parameter; gormlock's
// TestNestedStatementTimeoutIsNotAcquired sets it in an outer transaction.
func TestStatementTimeoutIsNotAcquired(t *testing.T) {
	forKinds(t, []testdb.Kind{testdb.Postgres, testdb.MariaDB}, func(t *testing.T, a adapter, k testdb.Kind) {
		if !runsOn(a, k) {
			t.Skip("PostgreSQL only")
		}
		key := "stmt-timeout-" + t.Name()
		defer testdb.RawHold(t, k, "", key)()
		param := "statement_timeout=300"
		if k == testdb.MariaDB {
			param = "max_statement_time=0.3"
		}
		enttest.Migrate(t, k)
		db := openWith(t, k, param)
		t.Cleanup(func() { closeChecked(t, k, db) })
		r := a.on(t, k.Dialect(), db)
		err := r.Transaction(context.Background(), key, func(txn) error { return nil }, ormlock.WithWait(5*time.Second))
		if !errors.Is(err, ormlock.ErrNotAcquired) {
			t.Fatalf("Transaction: %v, want ErrNotAcquired", err)
		}
		var state interface{ SQLState() string }
		var me *gomysql.MySQLError
		if !(errors.As(err, &state) && state.SQLState() == "57014") && !(errors.As(err, &me) && me.Number == 1969) &&
			!(k == testdb.MariaDB && strings.Contains(err.Error(), "GET_LOCK returned NULL")) {
			t.Fatalf("Transaction: %v, want the server's timeout error in the chain", err)
		}
	})
}

// A wait longer than PostgreSQL's largest lock_timeout (about 24.8 days)
// is clamped, not refused.
func TestWaitBeyondLockTimeoutMax(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := a.open(t, k)
		ran := false
		err := r.Transaction(context.Background(), "long-wait-"+t.Name(), func(txn) error { ran = true; return nil },
			ormlock.WithWait(30*24*time.Hour))
		if err != nil || !ran {
			t.Fatalf("Transaction: %v (ran %v)", err, ran)
		}
	})
}

// The MySQL driver's DSN settings that change what the server and driver
// answer, on every adapter over go-sql-driver/mysql: without parseTime the
// ledger's times come back as text; with clientFoundRows an UPDATE counts
// matched rows; with interpolateParams arguments are written into the
// statement text. Fencing, RunOnce, Runs and Prune work the same on each.
func TestMySQLDSNVariants(t *testing.T) {
	k := testdb.MariaDB
	base := testdb.DSN(t, k)
	variants := map[string]string{
		"parseTime off":     strings.Replace(base, "parseTime=true&loc=UTC", "parseTime=false", 1),
		"clientFoundRows":   base + "&clientFoundRows=true",
		"interpolateParams": base + "&interpolateParams=true",
	}
	for _, a := range adapters {
		if !runsOn(a, k) {
			continue
		}
		for name, dsn := range variants {
			t.Run(a.name+"/"+name, func(t *testing.T) {
				enttest.Migrate(t, k)
				db, err := sql.Open("mysql", dsn)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
				t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
				r := a.on(t, k.Dialect(), db)
				ctx := context.Background()
				tbl := testdb.Table(t, k, "s")
				opts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithFencing()}
				if err := r.Migrate(ctx, opts...); err != nil {
					t.Fatalf("Migrate: %v", err)
				}
				key := "dsn-" + t.Name()
				var tokens []int64
				for range 2 {
					err := r.Transaction(ctx, key, func(tx txn) error {
						tok, ok := tx.FencingToken()
						if !ok {
							return errors.New("no fencing token in fn's transaction")
						}
						tokens = append(tokens, tok)
						return nil
					}, opts...)
					if err != nil {
						t.Fatalf("Transaction: %v", err)
					}
				}
				if tokens[1] <= tokens[0] {
					t.Fatalf("tokens %v do not grow", tokens)
				}
				slot := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
				runs := 0
				for range 2 {
					err := r.RunOnce(ctx, "dsn-job", slot, func(txn) error {
						runs++
						return nil
					}, opts...)
					if err != nil && !errors.Is(err, ormlock.ErrAlreadyDone) {
						t.Fatalf("RunOnce: %v", err)
					}
				}
				if runs != 1 {
					t.Fatalf("fn ran %d times for one slot, want 1", runs)
				}
				rs, err := r.Runs(ctx, "dsn-job", 10, opts...)
				if err != nil || len(rs) != 1 || !rs[0].Slot.Equal(slot) || rs[0].Status != "done" {
					t.Fatalf("Runs = %+v, %v; want the one done run of %v", rs, err, slot)
				}
				if n, err := r.Prune(ctx, time.Hour, opts...); err != nil || n != 1 {
					t.Fatalf("Prune = %d, %v; want 1", n, err)
				}
			})
		}
	}
}

// openLibPQ opens a pool on the server of kind k through lib/pq, on which
// BEGIN and the lock cannot share a message (the fallback: BEGIN, then the
// lock, as hand-written SQL does). lib/pq would pass pgx's own DSN
// parameters to the server as settings, so they are dropped.
func openLibPQ(t *testing.T, k testdb.Kind) *sql.DB {
	t.Helper()
	dsn := strings.Replace(testdb.DSN(t, k), "&default_query_exec_mode=simple_protocol", "", 1)
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		testdb.AssertNoLeaks(t, k, db)
		_ = db.Close()
	})
	if err := db.Ping(); err != nil {
		t.Fatalf("lib/pq: %v", err)
	}
	return db
}

// With a driver other than pgx every promise holds through the fallback:
// the lock is held while fn runs and released with its transaction, a
// loser gets ErrNotAcquired (also after a wait), fn's error comes back
// unchanged and rolls back, a REPEATABLE READ transaction sees the commit
// of the holder before it, and RunOnce runs once per slot.
func TestOtherDriverLibPQ(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, a adapter, k testdb.Kind) {
		enttest.Migrate(t, k)
		db := openLibPQ(t, k)
		r := a.on(t, "postgres", db)
		ctx := context.Background()
		key := "libpq-" + t.Name()

		err := r.Transaction(ctx, key, func(tx txn) error {
			if free(t, k, key) {
				t.Error("the lock is free while fn runs")
			}
			return tx.Insert("libpq-"+a.name, 1)
		})
		if err != nil {
			t.Fatalf("Transaction: %v", err)
		}
		if !free(t, k, key) {
			t.Fatal("the lock is still held after Transaction")
		}

		boom := errors.New("boom")
		if err := r.Transaction(ctx, key, func(tx txn) error {
			if err := tx.Insert("libpq-rolled-back-"+a.name, 1); err != nil {
				return err
			}
			return boom
		}); err != boom {
			t.Fatalf("fn's error: %v, want it unchanged", err)
		}

		release := testdb.RawHold(t, k, "", key)
		called := false
		if err := r.Transaction(ctx, key, func(txn) error { called = true; return nil }); !errors.Is(err, ormlock.ErrNotAcquired) || called {
			t.Fatalf("loser: %v (fn called: %v)", err, called)
		}
		if err := r.Transaction(ctx, key, func(txn) error { called = true; return nil }, ormlock.WithWait(50*time.Millisecond)); !errors.Is(err, ormlock.ErrNotAcquired) || called {
			t.Fatalf("waiting loser: %v (fn called: %v)", err, called)
		}
		release()

		// REPEATABLE READ: fn's snapshot follows the lock, so it sees the
		// row a holder committed while this call waited
		rr := enttest.Owner(t, k)
		holderIn, holderGo := make(chan struct{}), make(chan struct{})
		held := make(chan error, 1)
		go func() {
			held <- r.Transaction(ctx, key, func(tx txn) error {
				close(holderIn)
				<-holderGo
				return tx.Insert(rr, 7)
			})
		}()
		<-holderIn
		var seen int64
		waiter := make(chan error, 1)
		go func() {
			waiter <- r.Transaction(ctx, key, func(tx txn) error {
				var err error
				seen, err = queryInt(tx, "SELECT COUNT(*) FROM items WHERE "+ofOwner(rr))
				return err
			}, ormlock.WithWait(10*time.Second), ormlock.WithTxOptions(&sql.TxOptions{Isolation: sql.LevelRepeatableRead}))
		}()
		awaitPgWaiter(t, k, ormlock.Name(key)) // the waiter is blocked on the lock
		close(holderGo)
		if err := <-held; err != nil {
			t.Fatalf("holder: %v", err)
		}
		if err := <-waiter; err != nil {
			t.Fatalf("REPEATABLE READ waiter: %v", err)
		}
		if seen != 1 {
			t.Fatalf("REPEATABLE READ waiter saw %d rows of the holder's commit, want 1", seen)
		}

		tbl := ledgerTable(t, k, r)
		slot := testdb.Slot(1)
		runs := 0
		for range 3 {
			err := r.RunOnce(ctx, "libpq", slot, func(txn) error { runs++; return nil }, ormlock.WithLedgerTable(tbl))
			if err != nil && !errors.Is(err, ormlock.ErrAlreadyDone) {
				t.Fatalf("RunOnce: %v", err)
			}
		}
		if runs != 1 {
			t.Fatalf("RunOnce ran %d times, want 1", runs)
		}
	})
}
