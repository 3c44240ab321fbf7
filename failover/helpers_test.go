package failover_test

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	entsql "entgo.io/ent/dialect/sql"
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent"
	"github.com/ormlock/ormlock/internal/testdb/gormtest"
)

func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }

// topology skips t unless ORMLOCK_TOPOLOGY is set: the topologies take
// seconds each to start, so make test leaves them to make compat.
func topology(t *testing.T) {
	t.Helper()
	if os.Getenv("ORMLOCK_TOPOLOGY") == "" {
		t.Skip("replication topologies run with ORMLOCK_TOPOLOGY=1 (make compat)")
	}
}

// gormVerbs calls every gormlock verb once on a pool of dialect
// ("postgres", "mysql"), fn counting its calls, and returns each verb's
// error.
func gormVerbs(t *testing.T, dialect string, sqlDB *sql.DB, ran *int) map[string]error {
	t.Helper()
	db := gormtest.On(t, dialect, sqlDB)
	txFn := func(*gorm.DB) error { *ran++; return nil }
	fn := func(context.Context) error { *ran++; return nil }
	slot := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return map[string]error{
		"Transaction":     gormlock.Transaction(db, "refused", txFn),
		"Session":         gormlock.Session(db, "refused", fn),
		"Lead":            gormlock.Lead(db, "refused", fn),
		"RunOnce":         gormlock.RunOnce(db, "refused", slot, txFn),
		"RunOnce (claim)": gormlock.RunOnce(db, "refused", slot, txFn, ormlock.WithClaim()),
	}
}

// entVerbs calls every entlock verb once on a pool of dialect.
func entVerbs(dialect string, sqlDB *sql.DB, ran *int) map[string]error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := ent.NewClient(ent.Driver(entlock.Wrap(entsql.OpenDB(dialect, sqlDB))))
	txFn := func(*ent.Tx) error { *ran++; return nil }
	fn := func(context.Context) error { *ran++; return nil }
	slot := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return map[string]error{
		"Transaction":     entlock.Transaction(ctx, client, "refused", txFn),
		"Session":         entlock.Session(ctx, client, "refused", fn),
		"Lead":            entlock.Lead(ctx, client, "refused", fn),
		"RunOnce":         entlock.RunOnce(ctx, client, "refused", slot, txFn),
		"RunOnce (claim)": entlock.RunOnce(ctx, client, "refused", slot, txFn, ormlock.WithClaim()),
	}
}

// assertAllRefused checks every verb of sqllock, gormlock and entlock on
// db (of dialect) is refused naming why, fn never called.
func assertAllRefused(t *testing.T, where, why, dialect string, db *sql.DB) {
	t.Helper()
	ran := 0
	assertRefused(t, where+": sqllock", why, sqlVerbs(db, &ran), ran)
	ran = 0
	assertRefused(t, where+": gormlock", why, gormVerbs(t, dialect, db, &ran), ran)
	ran = 0
	assertRefused(t, where+": entlock", why, entVerbs(dialect, db, &ran), ran)
}

// openPool opens a pool of driver on dsn, of at most 20 connections whose
// idle ones close after a second (a failover leaves none behind for long),
// closed at the end of the test.
func openPool(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(20)
	db.SetConnMaxIdleTime(time.Second)
	t.Cleanup(func() { db.Close() })
	return db
}
