package gormlock_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// fenceLedger creates the test's own ledger and fence tables with Migrate
// and drops both after the test; it returns the option naming them.
func fenceLedger(t *testing.T, k testdb.Kind, db *gorm.DB) ormlock.Option {
	t.Helper()
	name := "f_" + keyhashHex(t.Name())
	t.Cleanup(func() {
		admin := testdb.AdminDB(t, k)
		_, _ = admin.Exec("DROP TABLE IF EXISTS " + name)
		_, _ = admin.Exec("DROP TABLE IF EXISTS " + name + "_fence")
	})
	if err := gormlock.Migrate(db, ormlock.WithLedgerTable(name)); err != nil {
		t.Fatalf("Migrate(%s): %v", name, err)
	}
	return ormlock.WithLedgerTable(name)
}

// txToken runs a fenced Transaction on key and returns fn's token; fail
// makes fn return an error (the transaction rolls back).
func txToken(t *testing.T, db *gorm.DB, key string, fail bool, opts ...ormlock.Option) int64 {
	t.Helper()
	var tok int64
	errFail := errors.New("fn failed")
	err := gormlock.Transaction(db, key, func(tx *gorm.DB) error {
		var ok bool
		if tok, ok = gormlock.FencingToken(tx); !ok {
			t.Errorf("Transaction: no fencing token in tx")
		}
		if fail {
			return errFail
		}
		return nil
	}, append(opts, ormlock.WithFencing())...)
	if fail && !errors.Is(err, errFail) || !fail && err != nil {
		t.Fatalf("Transaction: %v", err)
	}
	return tok
}

// TestFencingVerbs checks that every verb hands fn a token greater than the
// last one of its key, in both ORMs' ways of reading it, after commits,
// rollbacks and panics, at every isolation level, and that keys, namespaces
// and jobs count apart.
func TestFencingVerbs(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := openGorm(t, k)
		tbl := fenceLedger(t, k, db)
		key := "fence-verbs-" + string(k)
		last := int64(0)
		next := func(what string, tok int64) {
			t.Helper()
			if tok <= last {
				t.Fatalf("%s: token %d is not greater than the last one, %d", what, tok, last)
			}
			last = tok
		}
		next("commit", txToken(t, db, key, false, tbl))
		next("rollback", txToken(t, db, key, true, tbl))
		next("after rollback", txToken(t, db, key, false, tbl))
		for _, iso := range []sql.IsolationLevel{sql.LevelRepeatableRead, sql.LevelSerializable} {
			next(iso.String(), txToken(t, db, key, false, tbl, ormlock.WithTxOptions(&sql.TxOptions{Isolation: iso})))
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("panic did not go on")
				}
			}()
			_ = gormlock.Transaction(db, key, func(tx *gorm.DB) error {
				tok, _ := gormlock.FencingToken(tx)
				next("panic", tok)
				panic("boom")
			}, tbl, ormlock.WithFencing())
		}()
		err := gormlock.Session(db, key, func(ctx context.Context) error {
			tok, ok := ormlock.FencingToken(ctx)
			if !ok {
				t.Error("Session: no token in ctx")
			}
			next("session", tok)
			return nil
		}, tbl, ormlock.WithFencing())
		if err != nil {
			t.Fatalf("Session: %v", err)
		}
		next("after session", txToken(t, db, key, false, tbl))

		// without WithFencing: no token
		if err := gormlock.Transaction(db, key, func(tx *gorm.DB) error {
			if _, ok := gormlock.FencingToken(tx); ok {
				t.Error("token without WithFencing")
			}
			return nil
		}, tbl); err != nil {
			t.Fatal(err)
		}
		// another namespace, another key: counters of their own
		if tok := txToken(t, db, key, false, tbl, ormlock.WithNamespace("fence-ns")); tok != 1 {
			t.Errorf("first token in a new namespace = %d, want 1", tok)
		}
		if tok := txToken(t, db, key+"-other", false, tbl); tok != 1 {
			t.Errorf("first token of a new key = %d, want 1", tok)
		}

		// RunOnce: one counter per job, across slots and modes
		job := "fence-job-" + string(k)
		lastJob := int64(0)
		for i, claim := range []bool{false, true, false, true} {
			opts := []ormlock.Option{tbl, ormlock.WithFencing()}
			if claim {
				opts = append(opts, ormlock.WithClaim())
			}
			err := gormlock.RunOnce(db, job, slotAt(i), func(tx *gorm.DB) error {
				tok, ok := gormlock.FencingToken(tx)
				if !ok || tok <= lastJob {
					t.Errorf("RunOnce slot %d (claim %v): token %d (ok %v), last %d", i, claim, tok, ok, lastJob)
				}
				lastJob = tok
				return nil
			}, opts...)
			if err != nil {
				t.Fatalf("RunOnce slot %d: %v", i, err)
			}
		}
	})
}

// TestFencingNested checks a lock taken in a savepoint of an open
// transaction (PostgreSQL): its token is committed on another connection,
// so it survives the outer transaction's rollback.
func TestFencingNested(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			db, _ := openGorm(t, k)
			tbl := fenceLedger(t, k, db)
			key := "fence-nested-" + string(k)
			var inner int64
			errOuter := errors.New("outer rolls back")
			err := db.Transaction(func(outer *gorm.DB) error {
				if err := gormlock.Transaction(outer, key, func(tx *gorm.DB) error {
					inner, _ = gormlock.FencingToken(tx)
					return nil
				}, tbl, ormlock.WithFencing()); err != nil {
					return err
				}
				return errOuter
			})
			if !errors.Is(err, errOuter) {
				t.Fatalf("outer: %v", err)
			}
			if inner < 1 {
				t.Fatalf("nested token %d", inner)
			}
			if tok := txToken(t, db, key, false, tbl); tok <= inner {
				t.Fatalf("token after the outer rollback %d <= %d", tok, inner)
			}
		})
	}
}

// TestFencingRefused checks what is refused before any lock is taken: a
// PostgreSQL pool of one connection (the token needs a second), and a
// missing fence table (Migrate not run), which releases the lock.
func TestFencingRefused(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, sqlDB := openGorm(t, k)
		key := "fence-refused-" + string(k)
		called := false
		fn := func(*gorm.DB) error { called = true; return nil }

		err := gormlock.Transaction(db, key, fn, ormlock.WithFencing(), ormlock.WithLedgerTable("no_such_ledger"))
		if err == nil || called {
			t.Fatalf("missing fence table: err %v, fn called %v", err, called)
		}
		if !rawFree(t, k, key) {
			t.Fatal("lock left held after a failed issuance")
		}
		err = gormlock.Session(db, key, func(context.Context) error { called = true; return nil },
			ormlock.WithFencing(), ormlock.WithLedgerTable("no_such_ledger"))
		if err == nil || called {
			t.Fatalf("Session, missing fence table: err %v, fn called %v", err, called)
		}
		long := "l123456789012345678901234567890123456789012345678901234567890"
		if err := gormlock.Transaction(db, key, fn, ormlock.WithFencing(), ormlock.WithLedgerTable(long)); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Fatalf("ledger name too long for the fence table: %v", err)
		}

		if k.Dialect() != "postgres" {
			return
		}
		tbl := fenceLedger(t, k, db)
		sqlDB.SetMaxOpenConns(1)
		defer sqlDB.SetMaxOpenConns(0)
		for name, call := range map[string]func() error{
			"Transaction": func() error { return gormlock.Transaction(db, key, fn, tbl, ormlock.WithFencing()) },
			"Session": func() error {
				return gormlock.Session(db, key, func(context.Context) error { called = true; return nil }, tbl, ormlock.WithFencing())
			},
			"RunOnce": func() error { return gormlock.RunOnce(db, key, slotAt(0), fn, tbl, ormlock.WithFencing()) },
		} {
			if err := call(); !errors.Is(err, ormlock.ErrInvalidArgument) || called {
				t.Errorf("%s on a pool of one: err %v, fn called %v", name, err, called)
			}
		}
	})
}
