package gormlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/gormtest"
)

// connID returns the server connection id of q: pg_backend_pid() or
// CONNECTION_ID().
func connID(t *testing.T, k testdb.Kind, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}) int64 {
	t.Helper()
	query := "SELECT CONNECTION_ID()"
	if k.Dialect() == "postgres" {
		query = "SELECT pg_backend_pid()"
	}
	var id int64
	if err := q.QueryRowContext(context.Background(), query).Scan(&id); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return id
}

func holderOf[K ormlock.KeyType](t *testing.T, db *gorm.DB, key K, opts ...ormlock.Option) ormlock.HolderInfo {
	t.Helper()
	h, err := gormlock.Holder(db, key, opts...)
	if err != nil {
		t.Fatalf("Holder(%v): %v", key, err)
	}
	if h.Dialect == "" || h.Lock == "" {
		t.Errorf("Holder(%v) without Dialect/Lock: %+v", key, h)
	}
	return h
}

// Holder asked through the holder's own GORM transaction, with the
// plugin's namespace: the lock is the transaction's own. The namespace
// itself is TestHolderNamespace in internal/conformance.
func TestHolderInOwnTransaction(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := gormtest.Open(t, k)
		if err := db.Use(gormlock.New(ormlock.WithNamespace("holderns"))); err != nil {
			t.Fatal(err)
		}
		key := "holder-ns-" + t.Name()
		err := gormlock.Transaction(db, key, func(tx *gorm.DB) error {
			pid := connID(t, k, mustSQLTx(t, tx))
			if h := holderOf(t, tx, key); !h.Held || h.PID != pid {
				return fmt.Errorf("from the holder's transaction: %v, want pid %d", h, pid)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// mustSQLTx returns the transaction under a GORM transaction: a *sql.Tx,
// or with pgx the pinned connection BEGIN and the lock were sent on.
func mustSQLTx(t *testing.T, tx *gorm.DB) gorm.ConnPool {
	t.Helper()
	if _, ok := tx.Statement.ConnPool.(gorm.TxCommitter); !ok {
		t.Fatalf("ConnPool is %T, not a transaction", tx.Statement.ConnPool)
	}
	return tx.Statement.ConnPool
}

// Why didn't the nightly job run? Ask who holds its lock.
func ExampleHolder() {
	var db *gorm.DB // opened elsewhere
	err := gormlock.Transaction(db, "daily-settlement", func(tx *gorm.DB) error { return nil })
	if errors.Is(err, ormlock.ErrNotAcquired) {
		h, herr := gormlock.Holder(db, "daily-settlement")
		if herr == nil && h.Held {
			// e.g. held pid=5311 user=app client=10.0.0.7:56870 state="idle in transaction" held_for=2h0m3s ...
			fmt.Printf("daily-settlement is held: %s\n", h)
		}
	}
}
