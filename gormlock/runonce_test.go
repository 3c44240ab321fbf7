package gormlock_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	_ "time/tzdata" // zone data for the DST tests, whatever the machine has

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/gormtest"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/testdb"
)

// ledgerTable creates the test's own ledger table with Migrate and drops it
// after the test.
func ledgerTable(t *testing.T, k testdb.Kind, db *gorm.DB) string {
	t.Helper()
	name := testdb.Table(t, k, "r")
	if err := gormlock.Migrate(db, ormlock.WithLedgerTable(name)); err != nil {
		t.Fatalf("Migrate(%s): %v", name, err)
	}
	return name
}

// runs reads the ledger of job through gormlock.Runs from db.
func runs(t *testing.T, db *gorm.DB, tbl, job string) []ormlock.Run {
	t.Helper()
	rs, err := gormlock.Runs(db, job, 1000, ormlock.WithLedgerTable(tbl))
	if err != nil {
		t.Fatalf("Runs: %v", err)
	}
	return rs
}

// Bad input only gormlock can get; the rest is TestRunOnceBadInput in
// internal/conformance.
func TestRunOnceBadInput(t *testing.T) {
	called := false
	fn := func(*gorm.DB) error { called = true; return nil }
	slot := testdb.Slot(0)
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"nil db", gormlock.RunOnce(nil, "j", slot, fn), "nil *gorm.DB"},
		{"nil db Migrate", gormlock.Migrate(nil), "nil *gorm.DB"},
	}
	for _, c := range cases {
		if !errors.Is(c.err, ormlock.ErrInvalidArgument) || !strings.Contains(c.err.Error(), c.want) || !strings.HasPrefix(c.err.Error(), "ormlock: ") {
			t.Errorf("%s: %v, want ErrInvalidArgument mentioning %q", c.name, c.err, c.want)
		}
	}
	if called {
		t.Error("fn called on bad input")
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

// With PrepareStmt the ledger statements bypass GORM's statement cache, as
// the lock statements do.
func TestRunOncePrepareStmt(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
		t.Run(string(k), func(t *testing.T) {
			db, _ := gormtest.Open(t, k, &gorm.Config{PrepareStmt: true})
			tbl := ledgerTable(t, k, db)
			work := table(t, k, db)
			job := "prep-" + t.Name()
			for i, mode := range []ormlock.Option{nil, ormlock.WithClaim(), nil} {
				err := gormlock.RunOnce(db, job, testdb.Slot(i%2), func(tx *gorm.DB) error {
					return tx.Exec("INSERT INTO "+work+" (id) VALUES (?)", i).Error
				}, ormlock.WithLedgerTable(tbl), mode)
				if i == 2 {
					if !errors.Is(err, ormlock.ErrAlreadyDone) {
						t.Fatalf("third run: %v", err)
					}
				} else if err != nil {
					t.Fatal(err)
				}
			}
			if n := count(t, db, work); n != 2 {
				t.Fatalf("work rows = %d, want 2", n)
			}
		})
	}
}
