package gormlock_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	_ "time/tzdata" // zone data for the DST tests, whatever the machine has

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/testdb"
)

func TestMigrate(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := openGorm(t, k)
		name := "m_" + keyhashHex(t.Name())
		t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + name) })
		off := testdb.LogOffset(t, k)
		// replicas starting together: concurrent and repeated Migrate calls
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			other, _ := openGorm(t, k)
			wg.Go(func() { errs[i] = gormlock.Migrate(other, ormlock.WithLedgerTable(name)) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("concurrent Migrate %d: %v", i, err)
			}
		}
		if err := gormlock.Migrate(db, ormlock.WithLedgerTable(name)); err != nil {
			t.Fatalf("Migrate again: %v", err)
		}
		testdb.AssertNoDuplicateKeyLogged(t, k, off)
		if !tableExists(t, k, name) {
			t.Fatalf("table %s not created", name)
		}

		// the plugin's ledger table applies to Migrate, RunOnce and Runs
		pname := "p_" + keyhashHex(t.Name())
		t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + pname) })
		pdb, _ := openGorm(t, k)
		if err := pdb.Use(gormlock.New(ormlock.WithLedgerTable(pname))); err != nil {
			t.Fatal(err)
		}
		if err := gormlock.Migrate(pdb); err != nil {
			t.Fatal(err)
		}
		job := "plugin-" + t.Name()
		if err := gormlock.RunOnce(pdb, job, slotAt(0), func(*gorm.DB) error { return nil }); err != nil {
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

func tableExists(t *testing.T, k testdb.Kind, name string) bool {
	t.Helper()
	var n int
	q := "SELECT count(*) FROM information_schema.tables WHERE table_name = $1"
	if k.Dialect() == "mysql" {
		q = "SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?"
	}
	if err := testdb.AdminDB(t, k).QueryRow(q, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

func TestLedgerBadTableNames(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		// a pool that is already closed: any statement would fail with
		// "sql: database is closed", so ErrInvalidArgument proves that
		// nothing was sent
		closed := testdb.Open(t, k)
		db := gormOn(t, k, closed)
		closed.Close()
		for _, name := range []string{"runs; DROP TABLE x", "", strings.Repeat("a", 64), "1runs", "a-b", `r"s`, "r`s", "schema.runs", "ré"} {
			opt := ormlock.WithLedgerTable(name)
			if err := gormlock.Migrate(db, opt); !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "table name") {
				t.Errorf("Migrate(%q): %v, want ErrInvalidArgument naming the table", name, err)
			}
			if err := gormlock.RunOnce(db, "j", slotAt(0), func(*gorm.DB) error { return nil }, opt); !errors.Is(err, ormlock.ErrInvalidArgument) {
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
		live, _ := openGorm(t, k)
		for _, mode := range []ormlock.Option{nil, ormlock.WithClaim()} {
			err := gormlock.RunOnce(live, "j", slotAt(0), func(*gorm.DB) error { return nil }, ormlock.WithLedgerTable("no_such_ledger"), mode)
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
