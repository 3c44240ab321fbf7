package gormlock_test

import (
	"errors"
	"testing"
	_ "time/tzdata" // zone data for the DST tests, whatever the machine has

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
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

// Runs refuses a nil db (the rest of Runs is in internal/conformance).
func TestRunsNilDB(t *testing.T) {
	if _, err := gormlock.Runs(nil, "job", 5); !errors.Is(err, ormlock.ErrInvalidArgument) {
		t.Errorf("nil db: %v", err)
	}
}
