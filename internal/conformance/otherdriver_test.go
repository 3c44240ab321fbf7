package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	_ "github.com/lib/pq" // a PostgreSQL driver that is not pgx

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
)

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
				seen, err = tx.QueryInt("SELECT COUNT(*) FROM items WHERE " + ofOwner(rr))
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
