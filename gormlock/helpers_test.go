package gormlock_test

import (
	"database/sql"
	"os"
	"testing"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
)

func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }

// openGorm opens a new pool on the shared server of kind k, wrapped in GORM,
// and asserts after the test that no lock and no connection leaked.
func openGorm(t *testing.T, k testdb.Kind, cfg ...*gorm.Config) (*gorm.DB, *sql.DB) {
	t.Helper()
	sqlDB := testdb.Open(t, k)
	db := gormOn(t, k, sqlDB, cfg...)
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, sqlDB) })
	return db, sqlDB
}

func gormOn(t *testing.T, k testdb.Kind, sqlDB *sql.DB, cfg ...*gorm.Config) *gorm.DB {
	t.Helper()
	return gormOnTB(t, k, sqlDB, cfg...)
}

func gormOnTB(t testing.TB, k testdb.Kind, sqlDB *sql.DB, cfg ...*gorm.Config) *gorm.DB {
	t.Helper()
	c := &gorm.Config{Logger: logger.Discard}
	if len(cfg) > 0 {
		c = cfg[0]
		if c.Logger == nil {
			c.Logger = logger.Discard
		}
	}
	var dial gorm.Dialector
	if k.Dialect() == "postgres" {
		dial = postgres.New(postgres.Config{Conn: sqlDB})
	} else {
		dial = mysql.New(mysql.Config{Conn: sqlDB, SkipInitializeWithVersion: true})
	}
	db, err := gorm.Open(dial, c)
	if err != nil {
		t.Fatalf("gorm.Open: %v", err)
	}
	return db
}

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
	name := "t_" + keyhashHex(t.Name())
	if err := db.Exec("CREATE TABLE " + name + " (id INT PRIMARY KEY, note VARCHAR(100))").Error; err != nil {
		t.Fatalf("create table: %v", err)
	}
	t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE " + name) })
	return name
}

func keyhashHex(s string) string {
	v := uint64(keyhash.Int64(s))
	const digits = "0123456789abcdef"
	b := make([]byte, 16)
	for i := 15; i >= 0; i-- {
		b[i] = digits[v&15]
		v >>= 4
	}
	return string(b)
}

func count(t *testing.T, db *gorm.DB, table string) int64 {
	t.Helper()
	var n int64
	if err := db.Table(table).Count(&n).Error; err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}
