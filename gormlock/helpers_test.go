package gormlock_test

import (
	"os"
	"testing"

	"gorm.io/gorm"

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
