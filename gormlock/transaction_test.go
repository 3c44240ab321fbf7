package gormlock_test

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	"gorm.io/gorm/utils/tests"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/gormtest"
	"github.com/ormlock/ormlock/internal/testdb"
)

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

// Bad input only gormlock can get; what every adapter can get is
// TestTransactionBadInput in internal/conformance.
func TestTransactionBadInput(t *testing.T) {
	called := false
	fn := func(*gorm.DB) error { called = true; return nil }
	if err := gormlock.Transaction(nil, "k", fn); !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "nil *gorm.DB") {
		t.Errorf("nil db: %v", err)
	}
	if called {
		t.Error("fn called on bad input")
	}
}

func TestPlugin(t *testing.T) {
	t.Run("unsupported dialect", func(t *testing.T) {
		db, err := gorm.Open(tests.DummyDialector{}, &gorm.Config{Logger: logger.Discard})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Use(gormlock.New()); !errors.Is(err, ormlock.ErrUnsupportedDialect) {
			t.Fatalf("Use on dummy dialect: %v", err)
		}
		if err := gormlock.Transaction(db, "k", func(*gorm.DB) error { return nil }); !errors.Is(err, ormlock.ErrUnsupportedDialect) {
			t.Fatalf("Transaction on dummy dialect: %v", err)
		}
	})
	t.Run("invalid option", func(t *testing.T) {
		db, _ := gormtest.Open(t, testdb.Postgres)
		if err := db.Use(gormlock.New(ormlock.WithLedgerTable("runs; DROP"))); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Fatalf("Use with bad table: %v", err)
		}
	})
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := gormtest.Open(t, k)
		if err := db.Use(gormlock.New(ormlock.WithNamespace("billing"), ormlock.WithWait(5*time.Second))); err != nil {
			t.Fatal(err)
		}
		name := "plugin-" + t.Name()
		err := gormlock.Transaction(db, name, func(*gorm.DB) error {
			// the plugin's namespace applies: the plain name is free, the
			// namespaced key is held
			if !rawFree(t, k, name) {
				return errors.New("plain name held: namespace not applied")
			}
			if rawFreeNS(t, k, "billing", name) {
				return errors.New("namespaced key is free")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// per-call options override the plugin's
		err = gormlock.Transaction(db, name, func(*gorm.DB) error {
			if rawFree(t, k, name) {
				return errors.New("per-call empty namespace not applied")
			}
			return nil
		}, ormlock.WithNamespace(""))
		if err != nil {
			t.Fatal(err)
		}
	})
}

func TestTransactionPrepareStmt(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
		t.Run(string(k), func(t *testing.T) {
			db, _ := gormtest.Open(t, k, &gorm.Config{PrepareStmt: true})
			tbl := table(t, k, db)
			key := "prep-" + t.Name()
			for i := range 3 {
				err := gormlock.Transaction(db, key, func(tx *gorm.DB) error {
					if rawFree(t, k, key) {
						return errors.New("lock not held")
					}
					return tx.Exec("INSERT INTO "+tbl+" (id) VALUES (?)", i).Error
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			if n := count(t, db, tbl); n != 3 {
				t.Fatalf("rows = %d", n)
			}
		})
	}
}
