package entlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	_ "time/tzdata" // zone data for the DST tests, whatever the machine has

	entsql "entgo.io/ent/dialect/sql"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent"
)

// Migrate works on the driver as on the client, and a ledger table given
// to Wrap applies to Migrate, RunOnce and Runs (concurrent Migrate is in
// internal/conformance).
func TestMigrateDriverAndWrapTable(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		drv, client, _ := openDriver(t, k)
		name := testdb.TableName(t, "m")
		t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + name) })
		if err := entlock.Migrate(ctx, client, ormlock.WithLedgerTable(name)); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		if err := entlock.Migrate(ctx, drv, ormlock.WithLedgerTable(name)); err != nil {
			t.Fatalf("Migrate on the driver: %v", err)
		}

		pname := testdb.TableName(t, "p")
		t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + pname) })
		pclient, _ := openEnt(t, k, ormlock.WithLedgerTable(pname))
		if err := entlock.Migrate(ctx, pclient); err != nil {
			t.Fatal(err)
		}
		job := "wrapdefault-" + t.Name()
		if err := entlock.RunOnce(ctx, pclient, job, testdb.Slot(0), func(*ent.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if rs, err := entlock.Runs(ctx, pclient, job, 5); err != nil || len(rs) != 1 {
			t.Fatalf("Runs via Wrap's table: %v %v", rs, err)
		}
		if rs := runs(t, client, pname, job); len(rs) != 1 {
			t.Fatalf("row not in Wrap's table: %v", rs)
		}
	})
}

// A bad ledger table as a Wrap default is reported by Err and by every
// verb; bad names per call are TestLedgerBadTableNames in
// internal/conformance.
func TestLedgerBadWrapTable(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		closed := testdb.Open(t, k)
		closed.Close()
		// as a Wrap default, reported by Err and by every verb
		bad := entlock.Wrap(entsql.OpenDB(k.Dialect(), closed), ormlock.WithLedgerTable("a-b"))
		if err := bad.Err(); !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "table name") {
			t.Errorf("Wrap with a bad table: Err() = %v", err)
		}
		if err := entlock.Migrate(ctx, bad); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Errorf("Migrate on a Wrap with a bad table: %v", err)
		}
	})
}
