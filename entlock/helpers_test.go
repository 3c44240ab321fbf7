package entlock_test

import (
	"context"
	"database/sql"
	"os"
	"testing"

	entsql "entgo.io/ent/dialect/sql"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent"
)

func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }

// openEnt opens a new pool on the shared server of kind k, builds an ent
// client on entlock.Wrap(opts...), and asserts after the test that no lock
// and no connection leaked.
func openEnt(t *testing.T, k testdb.Kind, opts ...ormlock.Option) (*ent.Client, *sql.DB) {
	t.Helper()
	return enttest.Open(t, k, opts...)
}

// openPool opens a new pool on the shared server of kind k, with the items
// table migrated, and asserts after the test that no lock and no connection
// leaked.
func openPool(t *testing.T, k testdb.Kind) *sql.DB {
	t.Helper()
	db := testdb.Open(t, k)
	enttest.Migrate(t, k)
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
	return db
}

// openPlain opens a client whose driver is not wrapped.
func openPlain(t *testing.T, k testdb.Kind) (*ent.Client, *sql.DB) {
	t.Helper()
	db := openPool(t, k)
	return ent.NewClient(ent.Driver(entsql.OpenDB(k.Dialect(), db))), db
}

func rawFree(t *testing.T, k testdb.Kind, name string) bool {
	t.Helper()
	return testdb.RawFree(t, k, "", name)
}

func count(t *testing.T, k testdb.Kind, owner string) int {
	t.Helper()
	return enttest.Count(t, k, owner)
}

// insert writes one item in tx.
func insert(ctx context.Context, tx *ent.Tx, owner string, n int) error {
	return tx.Item.Create().SetOwner(owner).SetN(n).Exec(ctx)
}

// openDriver is openEnt that also returns the wrapper, for calls that take
// the *entlock.Driver.
func openDriver(t *testing.T, k testdb.Kind, opts ...ormlock.Option) (*entlock.Driver, *ent.Client, *sql.DB) {
	t.Helper()
	db := openPool(t, k)
	drv := entlock.Wrap(entsql.OpenDB(k.Dialect(), db), opts...)
	if err := drv.Err(); err != nil {
		t.Fatal(err)
	}
	return drv, ent.NewClient(ent.Driver(drv)), db
}
