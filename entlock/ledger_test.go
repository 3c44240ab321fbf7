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
	"github.com/ormlock/ormlock/internal/enttest/ent"
	"github.com/ormlock/ormlock/internal/testdb"
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

func TestLedgerBadTableNames(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		// a pool that is already closed: any statement would fail with
		// "sql: database is closed", so ErrInvalidArgument proves that
		// nothing was sent
		closed := testdb.Open(t, k)
		closed.Close()
		client := ent.NewClient(ent.Driver(entlock.Wrap(entsql.OpenDB(k.Dialect(), closed))))
		fn := func(*ent.Tx) error { return errors.New("fn called") }
		for _, name := range []string{"runs; DROP TABLE x", "", strings.Repeat("a", 64), "1runs", "a-b", `r"s`, "r`s", "schema.runs", "ré"} {
			opt := ormlock.WithLedgerTable(name)
			if err := entlock.Migrate(ctx, client, opt); !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "table name") {
				t.Errorf("Migrate(%q): %v, want ErrInvalidArgument naming the table", name, err)
			}
			for _, mode := range []ormlock.Option{nil, ormlock.WithClaim()} {
				if err := entlock.RunOnce(ctx, client, "j", testdb.Slot(0), fn, opt, mode); !errors.Is(err, ormlock.ErrInvalidArgument) {
					t.Errorf("RunOnce with table %q: %v", name, err)
				}
			}
			if _, err := entlock.Runs(ctx, client, "j", 1, opt); !errors.Is(err, ormlock.ErrInvalidArgument) {
				t.Errorf("Runs with table %q: %v", name, err)
			}
		}
		// as a Wrap default, reported by Err and by every verb
		bad := entlock.Wrap(entsql.OpenDB(k.Dialect(), closed), ormlock.WithLedgerTable("a-b"))
		if err := bad.Err(); !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "table name") {
			t.Errorf("Wrap with a bad table: Err() = %v", err)
		}
		if err := entlock.Migrate(ctx, bad); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Errorf("Migrate on a Wrap with a bad table: %v", err)
		}
		// a missing table is reported with a hint
		live, _ := openEnt(t, k)
		for _, mode := range []ormlock.Option{nil, ormlock.WithClaim()} {
			err := entlock.RunOnce(ctx, live, "j-"+t.Name(), testdb.Slot(0), fn, ormlock.WithLedgerTable("no_such_ledger"), mode)
			if err == nil || !strings.Contains(err.Error(), "create it with Migrate") {
				t.Errorf("missing table: %v", err)
			}
		}
		if _, err := entlock.Runs(ctx, live, "j", 1, ormlock.WithLedgerTable("no_such_ledger")); err == nil || !strings.Contains(err.Error(), "create it with Migrate") {
			t.Errorf("Runs on a missing table: %v", err)
		}
	})
}
