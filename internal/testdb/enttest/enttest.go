package enttest

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"

	entsql "entgo.io/ent/dialect/sql"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent/item"
	"github.com/ormlock/ormlock/keyhash"
)

var (
	migrateMu sync.Mutex
	migrated  = map[testdb.Kind]bool{}
)

// Migrate creates the schema (table items) on the shared server of kind k,
// once per test binary and kind.
func Migrate(tb testing.TB, k testdb.Kind) {
	tb.Helper()
	migrateMu.Lock()
	defer migrateMu.Unlock()
	if migrated[k] {
		return
	}
	// The admin pool is shared and never closed, so neither is this client.
	client := ent.NewClient(ent.Driver(entsql.OpenDB(k.Dialect(), testdb.AdminDB(tb, k))))
	if err := client.Schema.Create(context.Background()); err != nil {
		tb.Fatalf("enttest: create schema on %s: %v", k, err)
	}
	migrated[k] = true
}

// Open returns an ent client on a new pool to the shared server of kind k,
// its driver wrapped with entlock.Wrap(opts...), with the schema created. It
// registers testdb.AssertNoLeaks for the pool, so every test that uses it
// checks that no lock and no connection leaked.
func Open(tb testing.TB, k testdb.Kind, opts ...ormlock.Option) (*ent.Client, *sql.DB) {
	tb.Helper()
	db := testdb.Open(tb, k)
	Migrate(tb, k)
	drv := entlock.Wrap(entsql.OpenDB(k.Dialect(), db), opts...)
	if err := drv.Err(); err != nil {
		tb.Fatalf("enttest: entlock.Wrap: %v", err)
	}
	tb.Cleanup(func() { testdb.AssertNoLeaks(tb, k, db) })
	return ent.NewClient(ent.Driver(drv)), db
}

// Count returns the number of items whose owner is owner, read on a
// separate admin connection.
func Count(tb testing.TB, k testdb.Kind, owner string) int {
	tb.Helper()
	client := ent.NewClient(ent.Driver(entsql.OpenDB(k.Dialect(), testdb.AdminDB(tb, k))))
	n, err := client.Item.Query().Where(item.Owner(owner)).Count(context.Background())
	if err != nil {
		tb.Fatalf("enttest: count items of %q: %v", owner, err)
	}
	return n
}

// Owner returns a per-test owner value (at most 100 bytes) for the items a
// test writes on the server of kind k, so tests that share the items table
// never see each other's rows. Rows of that owner left by an earlier run
// (go test -count) are deleted now and again at cleanup.
func Owner(tb testing.TB, k testdb.Kind) string {
	tb.Helper()
	name := tb.Name()
	if len(name) > 80 {
		name = fmt.Sprintf("%.60s-%016x", name, uint64(keyhash.Int64(name)))
	}
	Migrate(tb, k)
	client := ent.NewClient(ent.Driver(entsql.OpenDB(k.Dialect(), testdb.AdminDB(tb, k))))
	del := func() {
		if _, err := client.Item.Delete().Where(item.Owner(name)).Exec(context.Background()); err != nil {
			tb.Errorf("enttest: delete items of %q: %v", name, err)
		}
	}
	del()
	tb.Cleanup(del)
	return name
}
