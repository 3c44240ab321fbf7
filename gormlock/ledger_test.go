package gormlock_test

import (
	"errors"
	"strings"
	"testing"
	_ "time/tzdata" // zone data for the DST tests, whatever the machine has

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/gormtest"
	"github.com/ormlock/ormlock/internal/testdb"
)

// The plugin's ledger table applies to Migrate, RunOnce and Runs (Migrate
// itself is in internal/conformance).
func TestMigratePluginTable(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := gormtest.Open(t, k)
		pname := testdb.TableName(t, "p")
		t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + pname) })
		pdb, _ := gormtest.Open(t, k)
		if err := pdb.Use(gormlock.New(ormlock.WithLedgerTable(pname))); err != nil {
			t.Fatal(err)
		}
		if err := gormlock.Migrate(pdb); err != nil {
			t.Fatal(err)
		}
		job := "plugin-" + t.Name()
		if err := gormlock.RunOnce(pdb, job, testdb.Slot(0), func(*gorm.DB) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if rs, err := gormlock.Runs(pdb, job, 5); err != nil || len(rs) != 1 {
			t.Fatalf("Runs via the plugin's table: %v %v", rs, err)
		}
		if rs := runs(t, db, pname, job); len(rs) != 1 {
			t.Fatalf("row not in the plugin's table: %v", rs)
		}
	})
}

func TestLedgerBadTableNames(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		// a pool that is already closed: any statement would fail with
		// "sql: database is closed", so ErrInvalidArgument proves that
		// nothing was sent
		closed := testdb.Open(t, k)
		db := gormtest.On(t, k.Dialect(), closed)
		closed.Close()
		for _, name := range []string{"runs; DROP TABLE x", "", strings.Repeat("a", 64), "1runs", "a-b", `r"s`, "r`s", "schema.runs", "ré"} {
			opt := ormlock.WithLedgerTable(name)
			if err := gormlock.Migrate(db, opt); !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "table name") {
				t.Errorf("Migrate(%q): %v, want ErrInvalidArgument naming the table", name, err)
			}
			if err := gormlock.RunOnce(db, "j", testdb.Slot(0), func(*gorm.DB) error { return nil }, opt); !errors.Is(err, ormlock.ErrInvalidArgument) {
				t.Errorf("RunOnce with table %q: %v", name, err)
			}
			if _, err := gormlock.Runs(db, "j", 1, opt); !errors.Is(err, ormlock.ErrInvalidArgument) {
				t.Errorf("Runs with table %q: %v", name, err)
			}
		}
		if err := config.ValidIdentifier(ormlock.ErrInvalidArgument, "t", strings.Repeat("a", 63)); err != nil {
			t.Errorf("63-byte name rejected: %v", err)
		}
		// a missing table is reported with a hint
		live, _ := gormtest.Open(t, k)
		for _, mode := range []ormlock.Option{nil, ormlock.WithClaim()} {
			err := gormlock.RunOnce(live, "j", testdb.Slot(0), func(*gorm.DB) error { return nil }, ormlock.WithLedgerTable("no_such_ledger"), mode)
			if err == nil || !strings.Contains(err.Error(), "create it with Migrate") {
				t.Errorf("missing table: %v", err)
			}
		}
	})
}

// Runs refuses a nil db (the rest of Runs is in internal/conformance).
func TestRunsNilDB(t *testing.T) {
	if _, err := gormlock.Runs(nil, "job", 5); !errors.Is(err, ormlock.ErrInvalidArgument) {
		t.Errorf("nil db: %v", err)
	}
}
