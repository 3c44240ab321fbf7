package entlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // zone data for the DST tests, whatever the machine has

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent"
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

// Claim mode's own transaction commits fn's work before the row is marked
// done: right after fn's COMMIT the row still says running. The rest of
// claim mode is TestRunOnceClaim and its neighbours in internal/conformance.
func TestRunOnceClaimCommitsBeforeDone(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		client1, _ := openEnt(t, k)
		client2, _ := openEnt(t, k)
		tbl := ledgerTable(t, k, client1)
		owner := enttest.Owner(t, k)
		job := "claim-" + t.Name()
		var atCommit []ormlock.Run
		var atCommitErr error
		err := entlock.RunOnce(ctx, client1, job, testdb.Slot(3), func(tx *ent.Tx) error {
			if err := insert(ctx, tx, owner, 1); err != nil {
				return err
			}
			tx.OnCommit(func(next ent.Committer) ent.Committer {
				return ent.CommitFunc(func(ctx context.Context, tx *ent.Tx) error {
					err := next.Commit(ctx, tx)
					atCommit, atCommitErr = entlock.Runs(ctx, client2, job, 5, ormlock.WithLedgerTable(tbl))
					return err
				})
			})
			return nil
		}, ormlock.WithLedgerTable(tbl), ormlock.WithClaim())
		if err != nil {
			t.Fatalf("claim run: %v", err)
		}
		if atCommitErr != nil || len(atCommit) != 1 || atCommit[0].Status != "running" {
			t.Fatalf("ledger right after fn's commit: %+v %v, want still running", atCommit, atCommitErr)
		}
		if rs := runs(t, client2, tbl, job); len(rs) != 1 || rs[0].Status != "done" {
			t.Fatalf("ledger after the run: %+v, want done", rs)
		}
		if n := count(t, k, owner); n != 1 {
			t.Fatalf("work rows after the run = %d, want 1", n)
		}
	})
}

// Claim mode's transaction begins at fn's first statement on it: a job that
// works through the client (or not on the database at all) holds only the
// lock's connection, so a pool of two serves it.
func TestRunOnceClaimLazyTx(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		client, db := openEnt(t, k)
		tbl := ledgerTable(t, k, client)
		db.SetMaxOpenConns(2)
		owner := enttest.Owner(t, k)
		job := "lazy-" + t.Name()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		opts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithClaim()}
		err := entlock.RunOnce(ctx, client, job, testdb.Slot(0), func(*ent.Tx) error {
			for i := range 3 { // each statement commits on its own
				if err := client.Item.Create().SetOwner(owner).SetN(i).Exec(ctx); err != nil {
					return err
				}
			}
			if n := count(t, k, owner); n != 3 {
				return fmt.Errorf("client writes not committed as they went: %d rows", n)
			}
			return nil
		}, opts...)
		if err != nil {
			t.Fatalf("claim run through the client on a pool of 2: %v", err)
		}
		// fn's tx on the same pool of two
		err = entlock.RunOnce(ctx, client, job, testdb.Slot(1), func(tx *ent.Tx) error {
			return insert(ctx, tx, owner, 10)
		}, opts...)
		if err != nil {
			t.Fatalf("claim run through tx on a pool of 2: %v", err)
		}
		if n := count(t, k, owner); n != 4 {
			t.Fatalf("work rows = %d, want 4", n)
		}
		if rs := runs(t, client, tbl, job); len(rs) != 2 || rs[0].Status != "done" || rs[1].Status != "done" {
			t.Fatalf("ledger: %+v", rs)
		}
	})
}

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
