package entlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	_ "time/tzdata" // zone data for the DST tests, whatever the machine has

	entsql "entgo.io/ent/dialect/sql"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/enttest/ent"
	"github.com/ormlock/ormlock/internal/testdb"
)

func TestMigrate(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		drv, client, _ := openDriver(t, k)
		name := ledgerName(t, "m")
		t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + name) })
		// replicas starting together: concurrent and repeated Migrate calls,
		// on clients and on the driver
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			other, _ := openEnt(t, k)
			wg.Go(func() { errs[i] = entlock.Migrate(ctx, other, ormlock.WithLedgerTable(name)) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("concurrent Migrate %d: %v", i, err)
			}
		}
		if err := entlock.Migrate(ctx, client, ormlock.WithLedgerTable(name)); err != nil {
			t.Fatalf("Migrate again: %v", err)
		}
		if err := entlock.Migrate(ctx, drv, ormlock.WithLedgerTable(name)); err != nil {
			t.Fatalf("Migrate on the driver: %v", err)
		}
		if !tableExists(t, k, name) {
			t.Fatalf("table %s not created", name)
		}
		if !rawFree(t, k, "ormlock.migrate:"+name) {
			t.Fatal("Migrate's lock still held")
		}

		// a ledger table given to Wrap applies to Migrate, RunOnce and Runs
		pname := ledgerName(t, "p")
		t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + pname) })
		pclient, _ := openEnt(t, k, ormlock.WithLedgerTable(pname))
		if err := entlock.Migrate(ctx, pclient); err != nil {
			t.Fatal(err)
		}
		job := "wrapdefault-" + t.Name()
		if err := entlock.RunOnce(ctx, pclient, job, slotAt(0), func(*ent.Tx) error { return nil }); err != nil {
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
				if err := entlock.RunOnce(ctx, client, "j", slotAt(0), fn, opt, mode); !errors.Is(err, ormlock.ErrInvalidArgument) {
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
			err := entlock.RunOnce(ctx, live, "j-"+t.Name(), slotAt(0), fn, ormlock.WithLedgerTable("no_such_ledger"), mode)
			if err == nil || !strings.Contains(err.Error(), "create it with Migrate") {
				t.Errorf("missing table: %v", err)
			}
		}
		if _, err := entlock.Runs(ctx, live, "j", 1, ormlock.WithLedgerTable("no_such_ledger")); err == nil || !strings.Contains(err.Error(), "create it with Migrate") {
			t.Errorf("Runs on a missing table: %v", err)
		}
	})
}
