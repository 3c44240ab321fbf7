package entlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	_ "time/tzdata" // zone data for the DST tests, whatever the machine has

	"entgo.io/ent/dialect"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/enttest"
	"github.com/ormlock/ormlock/internal/enttest/ent"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
)

// ledgerName is a per-test table name with prefix.
func ledgerName(t *testing.T, prefix string) string {
	t.Helper()
	return fmt.Sprintf("%s_%016x", prefix, uint64(keyhash.Int64(t.Name())))
}

// ledgerTable creates the test's own ledger table with entlock.Migrate on x
// and drops it after the test.
func ledgerTable[T entlock.TxLike](t *testing.T, k testdb.Kind, x interface {
	Tx(context.Context) (T, error)
}) string {
	t.Helper()
	name := ledgerName(t, "e")
	t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + name) })
	if err := entlock.Migrate(context.Background(), x, ormlock.WithLedgerTable(name)); err != nil {
		t.Fatalf("Migrate(%s): %v", name, err)
	}
	return name
}

// slotAt returns a distinct, deterministic slot per index.
func slotAt(i int) time.Time {
	return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Hour)
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

// maxOf raises m to n.
func maxOf(m *atomic.Int64, n int64) {
	for {
		cur := m.Load()
		if n <= cur || m.CompareAndSwap(cur, n) {
			return
		}
	}
}

func TestRunOncePanic(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		client, _ := openEnt(t, k)
		tbl := ledgerTable(t, k, client)
		owner := enttest.Owner(t, k)
		job := "panic-" + t.Name()
		for _, claim := range []bool{false, true} {
			opts := []ormlock.Option{ormlock.WithLedgerTable(tbl)}
			slot := slotAt(0)
			if claim {
				opts = append(opts, ormlock.WithClaim())
				slot = slotAt(1)
			}
			var got any
			func() {
				defer func() { got = recover() }()
				_ = entlock.RunOnce(ctx, client, job, slot, func(tx *ent.Tx) error {
					if err := insert(ctx, tx, owner, 7); err != nil {
						return err
					}
					panic("kaboom")
				}, opts...)
			}()
			if got != "kaboom" {
				t.Fatalf("claim=%v: recovered %v, want the original panic value", claim, got)
			}
			if !rawFree(t, k, keys.NameValue(keys.RunKey(job, slot))) {
				t.Fatalf("claim=%v: lock still held after panic", claim)
			}
		}
		rs := runs(t, client, tbl, job)
		// transactional: rolled back, no row; claim: the row says failed
		if len(rs) != 1 || !rs[0].Slot.Equal(slotAt(1)) || rs[0].Status != ormlock.RunFailed || rs[0].Error != "panic: kaboom" {
			t.Fatalf("ledger after panics: %+v, want only the claim-mode row, failed with the panic", rs)
		}
		// claim mode's fn wrote in its own transaction, rolled back too
		if n := count(t, k, owner); n != 0 {
			t.Fatalf("work rows = %d, want 0", n)
		}
		for _, s := range []time.Time{slotAt(0), slotAt(1)} {
			if err := entlock.RunOnce(ctx, client, job, s, func(*ent.Tx) error { return nil }, ormlock.WithLedgerTable(tbl)); err != nil {
				t.Fatalf("retry after panic: %v", err)
			}
		}
	})
}

func TestRunOnceContext(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		client, _ := openEnt(t, k)
		tbl := ledgerTable(t, k, client)
		owner := enttest.Owner(t, k)
		job := "ctx-" + t.Name()
		opt := ormlock.WithLedgerTable(tbl)

		// an already cancelled context: fn is not called, nothing is
		// written, and the error matches both ErrNotAcquired and the
		// context's error
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		called := false
		for _, claim := range []ormlock.Option{nil, ormlock.WithClaim()} {
			err := entlock.RunOnce(ctx, client, job, slotAt(0), func(*ent.Tx) error { called = true; return nil }, opt, claim)
			if !errors.Is(err, context.Canceled) || !errors.Is(err, ormlock.ErrNotAcquired) || called {
				t.Fatalf("claim=%v: cancelled context: err=%v called=%v, want ErrNotAcquired and context.Canceled", claim != nil, err, called)
			}
		}

		// cancelled while fn runs: the transaction cannot commit, no row
		ctx, cancel = context.WithCancel(context.Background())
		err := entlock.RunOnce(ctx, client, job, slotAt(0), func(tx *ent.Tx) error {
			cancel()
			return insert(ctx, tx, owner, 1)
		}, opt)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("fn's statement after cancel: %v, want context.Canceled", err)
		}
		if rs := runs(t, client, tbl, job); len(rs) != 0 {
			t.Fatalf("ledger after a cancelled run: %+v", rs)
		}
		if n := count(t, k, owner); n != 0 {
			t.Fatalf("work rows = %d", n)
		}
		if err := entlock.RunOnce(context.Background(), client, job, slotAt(0), func(*ent.Tx) error { return nil }, opt); err != nil {
			t.Fatalf("later run: %v", err)
		}
	})
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
			err := entlock.RunOnce(ctx, drv, job, slotAt(i), func(tx dialect.Tx) error {
				if rawFree(t, k, keys.NameValue(keys.RunKey(job, slotAt(i)))) {
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

func TestRunOnceBadInput(t *testing.T) {
	ctx := context.Background()
	var nilCtx context.Context
	client, _ := openEnt(t, testdb.Postgres)
	called := false
	fn := func(*ent.Tx) error { called = true; return nil }
	slot := slotAt(0)
	runsErr := func(_ []ormlock.Run, err error) error { return err }
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"nil ctx", entlock.RunOnce(nilCtx, client, "j", slot, fn), "nil context"},
		{"nil client", entlock.RunOnce(ctx, (*ent.Client)(nil), "j", slot, fn), "nil client"},
		{"nil fn", entlock.RunOnce(ctx, client, "j", slot, (func(*ent.Tx) error)(nil)), "nil fn"},
		{"empty job", entlock.RunOnce(ctx, client, "", slot, fn), "empty job name"},
		{"long job", entlock.RunOnce(ctx, client, strings.Repeat("j", 192), slot, fn), "at most 191"},
		{"bad UTF-8 job", entlock.RunOnce(ctx, client, "j\xff", slot, fn), "not valid UTF-8"},
		{"NUL job", entlock.RunOnce(ctx, client, "j\x00", slot, fn), "NUL"},
		{"zero slot", entlock.RunOnce(ctx, client, "j", time.Time{}, fn), "zero slot"},
		{"ancient slot", entlock.RunOnce(ctx, client, "j", time.Date(999, 1, 1, 0, 0, 0, 0, time.UTC), fn), "outside years"},
		{"bad owner", entlock.RunOnce(ctx, client, "j", slot, fn, ormlock.WithOwner(strings.Repeat("o", 256))), "WithOwner"},
		{"bad wait", entlock.RunOnce(ctx, client, "j", slot, fn, ormlock.WithWait(-1)), "WithWait"},
		{"Migrate nil ctx", entlock.Migrate(nilCtx, client), "nil context"},
		{"Migrate nil client", entlock.Migrate(ctx, (*ent.Client)(nil)), "nil client"},
		{"Migrate nil driver", entlock.Migrate(ctx, (*entlock.Driver)(nil)), "nil client"},
		{"Runs nil ctx", runsErr(entlock.Runs(nilCtx, client, "j", 1)), "nil context"},
		{"Runs nil client", runsErr(entlock.Runs(ctx, (*ent.Client)(nil), "j", 1)), "nil client"},
		{"Runs limit 0", runsErr(entlock.Runs(ctx, client, "j", 0)), "limit"},
		{"Runs empty job", runsErr(entlock.Runs(ctx, client, "", 1)), "empty job name"},
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
		err := entlock.RunOnce(ctx, plain, "j-"+t.Name(), slotAt(0), func(*ent.Tx) error { called = true; return nil }, mode)
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
				err := entlock.RunOnce(ctx, tx.Client(), job, slotAt(0), func(*ent.Tx) error { return errors.New("fn called") }, ormlock.WithLedgerTable(tbl), mode)
				if !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "within a transaction") {
					return fmt.Errorf("claim=%v: RunOnce on tx.Client(): %v", mode != nil, err)
				}
			}
			// the plain client runs it in a transaction of its own
			return entlock.RunOnce(ctx, client, job, slotAt(0), func(*ent.Tx) error { return nil }, ormlock.WithLedgerTable(tbl))
		})
		if err != nil {
			t.Fatal(err)
		}
		if rs := runs(t, client, tbl, job); len(rs) != 1 {
			t.Fatalf("ledger: %+v", rs)
		}
	})
}

func TestRunOnceObserverAndNamespace(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		var mu sync.Mutex
		var events []ormlock.Event
		obs := ormlock.ObserverFunc(func(_ context.Context, e ormlock.Event) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, e)
		})
		setup, _ := openEnt(t, k)
		tbl := ledgerTable(t, k, setup)
		client, _ := openEnt(t, k, ormlock.WithNamespace("billing"), ormlock.WithObserver(obs), ormlock.WithLedgerTable(tbl))
		job := "observed-" + t.Name()
		name := keys.NameValue(keys.RunKey(job, slotAt(0)))
		err := entlock.RunOnce(ctx, client, job, slotAt(0), func(*ent.Tx) error {
			if !rawFree(t, k, name) {
				return errors.New("the run lock is the RunKey without the namespace")
			}
			if h, err := entlock.Holder(ctx, client, keys.RunKey(job, slotAt(0))); err != nil || !h.Held {
				return fmt.Errorf("namespaced RunKey not held: %v %v", h, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := entlock.RunOnce(ctx, client, job, slotAt(0), func(*ent.Tx) error { return nil }); !errors.Is(err, ormlock.ErrAlreadyDone) {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		var kinds []string
		for _, e := range events {
			if e.Verb != "RunOnce" || e.Namespace != "billing" || keys.NameValue(e.Key) != name {
				t.Errorf("event %+v", e)
			}
			kinds = append(kinds, e.Kind.String())
		}
		got := strings.Join(kinds, ",")
		if want := "attempt,acquired,released,attempt,acquired,already_done,released"; got != want {
			t.Errorf("events %s, want %s", got, want)
		}
	})
}
