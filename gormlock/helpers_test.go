package gormlock_test

import (
	"os"
	"testing"
	_ "time/tzdata" // zone data for the DST examples, whatever the machine has

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }

// rawHold takes the lock for name (no namespace) with hand-written SQL on a
// dedicated connection and returns its release (see testdb.RawHold).
func rawHold(t *testing.T, k testdb.Kind, name string) (release func()) {
	t.Helper()
	return testdb.RawHold(t, k, "", name)
}

// rawFree reports whether hand-written SQL can take the lock for name right
// now (and releases it at once).
func rawFree(t *testing.T, k testdb.Kind, name string) bool {
	t.Helper()
	return testdb.RawFree(t, k, "", name)
}

// rawFreeNS is rawFree for a name in namespace ns.
func rawFreeNS(t *testing.T, k testdb.Kind, ns, name string) bool {
	t.Helper()
	return testdb.RawFree(t, k, ns, name)
}

// table creates a scratch table for the test and drops it afterwards.
func table(t *testing.T, k testdb.Kind, db *gorm.DB) string {
	t.Helper()
	name := testdb.Table(t, k, "t")
	if err := db.Exec("CREATE TABLE " + name + " (id INT PRIMARY KEY, note VARCHAR(100))").Error; err != nil {
		t.Fatalf("create table: %v", err)
	}
	return name
}

func count(t *testing.T, db *gorm.DB, table string) int64 {
	t.Helper()
	var n int64
	if err := db.Table(table).Count(&n).Error; err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

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
