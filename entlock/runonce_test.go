package entlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	_ "time/tzdata" // zone data for the DST tests, whatever the machine has

	"entgo.io/ent/dialect"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/enttest"
	"github.com/ormlock/ormlock/internal/enttest/ent"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/testdb"
)

// ledgerTable creates the test's own ledger table with entlock.Migrate on x
// and drops it after the test.
func ledgerTable[T entlock.TxLike](t *testing.T, k testdb.Kind, x interface {
	Tx(context.Context) (T, error)
}) string {
	t.Helper()
	name := testdb.Table(t, k, "e")
	if err := entlock.Migrate(context.Background(), x, ormlock.WithLedgerTable(name)); err != nil {
		t.Fatalf("Migrate(%s): %v", name, err)
	}
	return name
}

// runs reads the ledger of job through entlock.Runs.
func runs(t *testing.T, client *ent.Client, tbl, job string) []ormlock.Run {
	t.Helper()
	rs, err := entlock.Runs(context.Background(), client, job, 1000, ormlock.WithLedgerTable(tbl))
	if err != nil {
		t.Fatalf("Runs: %v", err)
	}
	return rs
}

// The *Driver can stand in for the client: fn then gets ent's dialect.Tx.
func TestRunOnceOnDriver(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		drv, client, _ := openDriver(t, k)
		tbl := ledgerTable(t, k, drv)
		owner := enttest.Owner(t, k)
		job := "driver-" + t.Name()
		q := "INSERT INTO items (owner, n) VALUES ($1, $2)"
		if k.Dialect() == "mysql" {
			q = "INSERT INTO items (owner, n) VALUES (?, ?)"
		}
		for i, mode := range []ormlock.Option{nil, ormlock.WithClaim()} {
			err := entlock.RunOnce(ctx, drv, job, testdb.Slot(i), func(tx dialect.Tx) error {
				if rawFree(t, k, keys.NameValue(keys.RunKey(job, testdb.Slot(i)))) {
					return errors.New("lock not held")
				}
				return tx.Exec(ctx, q, []any{owner, i}, nil)
			}, ormlock.WithLedgerTable(tbl), mode)
			if err != nil {
				t.Fatalf("claim=%v: %v", mode != nil, err)
			}
		}
		if n := count(t, k, owner); n != 2 {
			t.Fatalf("work rows = %d, want 2", n)
		}
		rs, err := entlock.Runs(ctx, drv, job, 5, ormlock.WithLedgerTable(tbl))
		if err != nil || len(rs) != 2 {
			t.Fatalf("Runs on the driver: %+v %v", rs, err)
		}
		if rs2 := runs(t, client, tbl, job); len(rs2) != 2 || !rs2[0].Slot.Equal(rs[0].Slot) {
			t.Fatalf("Runs on the client: %+v", rs2)
		}
	})
}

// Bad input only entlock can get; the rest is TestRunOnceBadInput in
// internal/conformance.
func TestRunOnceBadInput(t *testing.T) {
	ctx := context.Background()
	var nilCtx context.Context
	client, _ := openEnt(t, testdb.Postgres)
	called := false
	fn := func(*ent.Tx) error { called = true; return nil }
	slot := testdb.Slot(0)
	runsErr := func(_ []ormlock.Run, err error) error { return err }
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"nil ctx", entlock.RunOnce(nilCtx, client, "j", slot, fn), "nil context"},
		{"nil client", entlock.RunOnce(ctx, (*ent.Client)(nil), "j", slot, fn), "nil client"},
		{"Migrate nil ctx", entlock.Migrate(nilCtx, client), "nil context"},
		{"Migrate nil client", entlock.Migrate(ctx, (*ent.Client)(nil)), "nil client"},
		{"Migrate nil driver", entlock.Migrate(ctx, (*entlock.Driver)(nil)), "nil client"},
		{"Runs nil ctx", runsErr(entlock.Runs(nilCtx, client, "j", 1)), "nil context"},
		{"Runs nil client", runsErr(entlock.Runs(ctx, (*ent.Client)(nil), "j", 1)), "nil client"},
	}
	for _, c := range cases {
		if !errors.Is(c.err, ormlock.ErrInvalidArgument) || !strings.Contains(c.err.Error(), c.want) || !strings.HasPrefix(c.err.Error(), "ormlock: ") {
			t.Errorf("%s: %v, want ErrInvalidArgument mentioning %q", c.name, c.err, c.want)
		}
	}
	if called {
		t.Error("fn called on bad input")
	}
}

func TestRunOnceNotWrapped(t *testing.T) {
	ctx := context.Background()
	plain, _ := openPlain(t, testdb.Postgres)
	called := false
	for _, mode := range []ormlock.Option{nil, ormlock.WithClaim()} {
		err := entlock.RunOnce(ctx, plain, "j-"+t.Name(), testdb.Slot(0), func(*ent.Tx) error { called = true; return nil }, mode)
		if !errors.Is(err, entlock.ErrNotWrapped) || called {
			t.Fatalf("claim=%v: err=%v called=%v, want ErrNotWrapped", mode != nil, err, called)
		}
	}
	if err := entlock.Migrate(ctx, plain); !errors.Is(err, entlock.ErrNotWrapped) {
		t.Errorf("Migrate: %v", err)
	}
	if _, err := entlock.Runs(ctx, plain, "j", 1); !errors.Is(err, entlock.ErrNotWrapped) {
		t.Errorf("Runs: %v", err)
	}
	if _, err := entlock.Holder(ctx, plain, "j"); !errors.Is(err, entlock.ErrNotWrapped) {
		t.Errorf("Holder: %v", err)
	}
}

// ent has no nested transactions: a transactional client is refused.
func TestRunOnceOnTransactionalClient(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		client, _ := openEnt(t, k)
		tbl := ledgerTable(t, k, client)
		job := "nested-" + t.Name()
		err := entlock.Transaction(ctx, client, "outer-"+t.Name(), func(tx *ent.Tx) error {
			for _, mode := range []ormlock.Option{nil, ormlock.WithClaim()} {
				err := entlock.RunOnce(ctx, tx.Client(), job, testdb.Slot(0), func(*ent.Tx) error { return errors.New("fn called") }, ormlock.WithLedgerTable(tbl), mode)
				if !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "within a transaction") {
					return fmt.Errorf("claim=%v: RunOnce on tx.Client(): %v", mode != nil, err)
				}
			}
			// the plain client runs it in a transaction of its own
			return entlock.RunOnce(ctx, client, job, testdb.Slot(0), func(*ent.Tx) error { return nil }, ormlock.WithLedgerTable(tbl))
		})
		if err != nil {
			t.Fatal(err)
		}
		if rs := runs(t, client, tbl, job); len(rs) != 1 {
			t.Fatalf("ledger: %+v", rs)
		}
	})
}
