package gormlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/gormtest"
)

// gormlock's verbs called with a *gorm.DB that is in a transaction already
// (GORM's nesting): on PostgreSQL the lock is taken in a savepoint and lives
// until the outer transaction ends; on MySQL/MariaDB it is refused.

func TestTransactionNested(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := gormtest.Open(t, k)
		key := "nested-" + t.Name()
		if k.Dialect() == "mysql" {
			called := false
			err := db.Transaction(func(outer *gorm.DB) error {
				return gormlock.Transaction(outer, key, func(*gorm.DB) error { called = true; return nil })
			})
			if !errors.Is(err, gormlock.ErrNestedTransaction) || called {
				t.Fatalf("err=%v called=%v, want ErrNestedTransaction and fn not called", err, called)
			}
			return
		}
		tbl := table(t, k, db)
		err := db.Transaction(func(outer *gorm.DB) error {
			if err := gormlock.Transaction(outer, key, func(tx *gorm.DB) error {
				return tx.Exec("INSERT INTO " + tbl + " (id) VALUES (1)").Error
			}); err != nil {
				return err
			}
			if rawFree(t, k, key) {
				return errors.New("nested lock released before the outer transaction ended")
			}
			// a failing nested call rolls back its savepoint, dropping its
			// lock and its work, while the outer transaction goes on
			boom := errors.New("boom")
			if err := gormlock.Transaction(outer, key+"-2", func(tx *gorm.DB) error {
				tx.Exec("INSERT INTO " + tbl + " (id) VALUES (2)")
				return boom
			}); err != boom {
				return fmt.Errorf("nested error = %v, want boom", err)
			}
			if !rawFree(t, k, key+"-2") {
				return errors.New("failed nested call kept its lock")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n := count(t, db, tbl); n != 1 {
			t.Fatalf("rows = %d, want 1 (first nested committed, second rolled back)", n)
		}
		if !rawFree(t, k, key) {
			t.Fatal("lock held after outer commit")
		}
	})
}

// Nested in a REPEATABLE READ transaction, whose snapshot predates the lock:
// refused before fn runs.
func TestNestedSnapshotIsolationRefused(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			db, _ := gormtest.Open(t, k)
			ran := false
			err := db.Transaction(func(tx *gorm.DB) error {
				return gormlock.Transaction(tx, "nested-rr-"+t.Name(), func(*gorm.DB) error { ran = true; return nil })
			}, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
			if !errors.Is(err, ormlock.ErrInvalidArgument) || ran {
				t.Fatalf("nested Transaction: %v (ran %v), want ErrInvalidArgument", err, ran)
			}
		})
	}
}

// A statement timeout set in the outer transaction (SET LOCAL, as behind
// PgBouncer, which refuses it as a startup parameter) shorter than a nested
// call's wait, the lock held elsewhere: not acquired, with the server's
// error kept in the chain. TestStatementTimeoutIsNotAcquired in
// internal/conformance sets it in the DSN.
func TestNestedStatementTimeoutIsNotAcquired(t *testing.T) {
	k := testdb.PgBouncer
	key := "stmt-timeout-" + t.Name()
	defer rawHold(t, k, key)()
	db, _ := gormtest.Open(t, k)
	err := db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec("SET LOCAL statement_timeout = 300").Error; err != nil {
			return err
		}
		return gormlock.Transaction(tx, key, func(*gorm.DB) error { return nil }, ormlock.WithWait(5*time.Second))
	})
	var state interface{ SQLState() string }
	if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.As(err, &state) || state.SQLState() != "57014" {
		t.Fatalf("Transaction: %v, want ErrNotAcquired with the server's timeout error (57014) in the chain", err)
	}
}

// TestCheckServerNestedOnePool: the first call on a pool, nested in a
// transaction of a pool with a single connection, asks its question through
// that transaction rather than waiting for a second connection.
func TestCheckServerNestedOnePool(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			db, sqlDB := gormtest.Open(t, k) // a new pool: nothing cached yet
			sqlDB.SetMaxOpenConns(1)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			ran := false
			err := db.WithContext(ctx).Transaction(func(outer *gorm.DB) error {
				return gormlock.Transaction(outer, "nested-onepool-"+string(k), func(*gorm.DB) error { ran = true; return nil })
			})
			if err != nil || !ran {
				t.Fatalf("nested Transaction on a one-connection pool: err=%v ran=%v", err, ran)
			}
		})
	}
}

func TestRunOnceNested(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := gormtest.Open(t, k)
		tbl := ledgerTable(t, k, db)
		job := "nested-" + t.Name()
		opt := ormlock.WithLedgerTable(tbl)
		errOuter := errors.New("outer rolls back")
		err := db.Transaction(func(tx *gorm.DB) error {
			if err := gormlock.RunOnce(tx, job, testdb.Slot(0), func(*gorm.DB) error { return nil }, opt, ormlock.WithClaim()); !errors.Is(err, ormlock.ErrInvalidArgument) {
				return fmt.Errorf("claim mode inside a transaction: %v, want ErrInvalidArgument", err)
			}
			err := gormlock.RunOnce(tx, job, testdb.Slot(0), func(*gorm.DB) error { return nil }, opt)
			if k.Dialect() == "mysql" {
				if !errors.Is(err, gormlock.ErrNestedTransaction) {
					return fmt.Errorf("nested on mysql: %v, want ErrNestedTransaction", err)
				}
				return errOuter
			}
			if err != nil {
				return fmt.Errorf("nested on postgres: %v", err)
			}
			// the lock stays with the outer transaction until it ends
			if rawFree(t, k, keys.NameValue(keys.RunKey(job, testdb.Slot(0)))) {
				return errors.New("lock released before the outer transaction ended")
			}
			return errOuter
		})
		if err != errOuter {
			t.Fatal(err)
		}
		// the outer rollback took the ledger row with it
		if rs := runs(t, db, tbl, job); len(rs) != 0 {
			t.Fatalf("ledger after the outer rollback: %+v", rs)
		}
	})
}

// A refused set nested in an outer PostgreSQL transaction gives back the
// keys it took: its savepoint is rolled back, and the outer transaction
// goes on.
func TestTransactionNestedSetRefused(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			db, _ := gormtest.Open(t, k)
			a, b := "nested-set-a-"+t.Name(), "nested-set-b-"+t.Name()
			// the set takes a and b in its canonical order: hold whichever
			// comes second, so that the first is taken before the refusal
			for _, held := range []string{a, b} {
				release := testdb.RawHold(t, k, "", held)
				err := db.Transaction(func(outer *gorm.DB) error {
					err := gormlock.Transaction(outer, ormlock.All(a, b), func(*gorm.DB) error {
						t.Error("fn ran without every key")
						return nil
					})
					if !errors.Is(err, ormlock.ErrNotAcquired) {
						t.Errorf("nested All with %s held: %v, want ErrNotAcquired", held, err)
					}
					for _, n := range []string{a, b} {
						if n != held && !rawFree(t, k, n) {
							t.Errorf("%s still held by the refused nested set", n)
						}
					}
					return outer.Exec("SELECT 1").Error // the outer transaction goes on
				})
				if err != nil {
					t.Fatal(err)
				}
				release()
			}
		})
	}
}

// A nested call whose context ends while fn runs returns an error, and its
// savepoint is rolled back all the same (on a statement context of its
// own), taking fn's work and the lock with it: the outer transaction goes
// on, and commits only its own work.
func TestNestedContextEndedInFn(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			db, _ := gormtest.Open(t, k)
			tbl := table(t, k, db)
			key := "nested-ctx-" + t.Name()
			err := db.Transaction(func(outer *gorm.DB) error {
				ctx, cancel := context.WithCancel(context.Background())
				err := gormlock.Transaction(outer.WithContext(ctx), key, func(tx *gorm.DB) error {
					if err := tx.Exec("INSERT INTO " + tbl + " (id) VALUES (1)").Error; err != nil {
						return err
					}
					cancel()
					return nil
				})
				if !errors.Is(err, context.Canceled) {
					return fmt.Errorf("nested call whose context ended in fn: %v, want context.Canceled", err)
				}
				if !rawFree(t, k, key) {
					return errors.New("the nested call's lock outlived its rolled-back savepoint")
				}
				return outer.Exec("INSERT INTO " + tbl + " (id) VALUES (2)").Error
			})
			if err != nil {
				t.Fatal(err)
			}
			if n := count(t, db, tbl); n != 1 {
				t.Fatalf("rows = %d, want 1 (fn's row rolled back with its savepoint, the outer one committed)", n)
			}
		})
	}
}
