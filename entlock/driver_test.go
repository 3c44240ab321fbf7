package entlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent/item"
	"github.com/ormlock/ormlock/keyhash"
)

func TestTransactionNotWrapped(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		plain, _ := openPlain(t, k)
		key := "unwrapped-" + t.Name()
		called := false
		err := entlock.Transaction(ctx, plain, key, func(*ent.Tx) error { called = true; return nil })
		if !errors.Is(err, entlock.ErrNotWrapped) || !errors.Is(err, ormlock.ErrInvalidArgument) || called {
			t.Fatalf("err=%v called=%v, want ErrNotWrapped and fn not called", err, called)
		}
		if !strings.Contains(err.Error(), "entlock.Wrap") {
			t.Fatalf("error %q does not say how to fix it", err)
		}
		t.Logf("unwrapped client: %v", err)
		err = entlock.Session(ctx, plain, key, func(context.Context) error { called = true; return nil })
		if !errors.Is(err, entlock.ErrNotWrapped) || called {
			t.Fatalf("Session: err=%v called=%v, want ErrNotWrapped and fn not called", err, called)
		}
	})
}

// A plain client.Tx / BeginTx and plain queries on a wrapped driver behave as
// before: no lock, ordinary commit and rollback.
func TestPlainUseUnchanged(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		client, _ := openEnt(t, k)
		owner := enttest.Owner(t, k)
		tx, err := client.Tx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := insert(ctx, tx, owner, 1); err != nil {
			t.Fatal(err)
		}
		if err := testdb.Leaks(k); err != nil {
			t.Fatalf("plain client.Tx took a lock: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		tx, err = client.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelSerializable})
		if err != nil {
			t.Fatal(err)
		}
		if err := insert(ctx, tx, owner, 2); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if err := client.Item.Create().SetOwner(owner).SetN(3).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := client.ExecContext(ctx, "UPDATE items SET n = n + 10 WHERE owner = "+map[string]string{"postgres": "$1", "mysql": "?"}[k.Dialect()], owner); err != nil {
			t.Fatal(err)
		}
		items, err := client.Item.Query().Where(item.Owner(owner)).Order(item.ByN()).All(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(items) != 2 || items[0].N != 11 || items[1].N != 13 {
			t.Fatalf("items = %v, want n 11 and 13", items)
		}
	})
}

func TestWrapUnusable(t *testing.T) {
	ctx := context.Background()
	k := testdb.Postgres
	db := openPool(t, k)
	called := false
	fn := func(*ent.Tx) error { called = true; return nil }
	for _, c := range []struct {
		name  string
		drv   *entlock.Driver
		want  error
		text  string
		plain bool // plain use still works
	}{
		{"sqlite3", entlock.Wrap(entsql.OpenDB(dialect.SQLite, db)), ormlock.ErrUnsupportedDialect, `"sqlite3"`, false},
		{"nil driver", entlock.Wrap(nil), ormlock.ErrInvalidArgument, "nil driver", false},
		{"no *sql.DB", entlock.Wrap(noDB{entsql.OpenDB(dialect.Postgres, db)}), ormlock.ErrUnsupportedDialect, "*sql.DB", true},
		{"bad option", entlock.Wrap(entsql.OpenDB(dialect.Postgres, db), ormlock.WithKeepalive(0)), ormlock.ErrInvalidArgument, "WithKeepalive", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.drv.Err(); !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
				t.Fatalf("Err() = %v, want %v mentioning %s", err, c.want, c.text)
			}
			client := ent.NewClient(ent.Driver(c.drv))
			if err := entlock.Transaction(ctx, client, "k-"+t.Name(), fn); !errors.Is(err, c.want) {
				t.Fatalf("Transaction: %v, want %v", err, c.want)
			}
			if err := entlock.Session(ctx, client, "k-"+t.Name(), func(context.Context) error { called = true; return nil }); !errors.Is(err, c.want) {
				t.Fatalf("Session: %v, want %v", err, c.want)
			}
			if err := entlock.Session(ctx, c.drv, "k-"+t.Name(), func(context.Context) error { called = true; return nil }); !errors.Is(err, c.want) {
				t.Fatalf("Session on the driver: %v, want %v", err, c.want)
			}
			if c.plain {
				if _, err := client.Item.Query().Count(ctx); err != nil {
					t.Fatalf("plain query on the wrapper: %v", err)
				}
				tx, err := client.Tx(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := tx.Rollback(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	if called {
		t.Fatal("fn called")
	}
}

func TestWrapDefaults(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		client, _ := openEnt(t, k, ormlock.WithNamespace("billing"), ormlock.WithWait(5*time.Second))
		name := "defaults-" + t.Name()
		held := func(ns string) bool {
			t.Helper()
			if ns == "" {
				return !rawFree(t, k, name)
			}
			// the namespaced key, computed independently
			admin := testdb.AdminDB(t, k)
			var ok bool
			var err error
			if k.Dialect() == "postgres" {
				err = admin.QueryRow("SELECT pg_try_advisory_xact_lock($1)", keyhash.Int64NS(ns, name)).Scan(&ok)
			} else {
				err = admin.QueryRow("SELECT IS_FREE_LOCK(?)", ns+":"+name).Scan(&ok)
			}
			if err != nil {
				t.Fatal(err)
			}
			return !ok
		}
		err := entlock.Transaction(ctx, client, name, func(*ent.Tx) error {
			if held("") {
				return errors.New("plain name held: the driver's namespace was not applied")
			}
			if !held("billing") {
				return errors.New("namespaced key is free")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// per-call options override the driver's
		err = entlock.Transaction(ctx, client, name, func(*ent.Tx) error {
			if !held("") {
				return errors.New("per-call empty namespace not applied")
			}
			return nil
		}, ormlock.WithNamespace(""))
		if err != nil {
			t.Fatal(err)
		}
	})
}

// dialect.Debug outside the wrapper (the client's Debug method) logs the
// locked transaction's statements.
func TestTransactionDebugClient(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		db := openPool(t, k)
		var mu sync.Mutex
		var logged []string
		client := ent.NewClient(ent.Driver(entlock.Wrap(entsql.OpenDB(k.Dialect(), db))), ent.Log(func(a ...any) {
			mu.Lock()
			defer mu.Unlock()
			logged = append(logged, fmt.Sprint(a...))
		})).Debug()
		key := "debug-" + t.Name()
		owner := enttest.Owner(t, k)
		err := entlock.Transaction(ctx, client, key, func(tx *ent.Tx) error {
			if rawFree(t, k, key) {
				return errors.New("lock not held")
			}
			return insert(ctx, tx, owner, 1)
		})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if s := strings.Join(logged, "\n"); !strings.Contains(s, "INSERT") || !strings.Contains(s, "committed") {
			t.Fatalf("debug log lacks the transaction's statements:\n%s", s)
		}
	})
}

// noDB is a driver that does not expose its *sql.DB.
type noDB struct{ dialect.Driver }

// A Wrap with an invalid option fails closed: an application that never
// checks drv.Err() must not take its locks without the namespace it asked
// for. Every verb, through the client or the driver, returns Err() without
// calling fn and without taking a lock; ent's own use of the driver works.
func TestWrapFailsClosed(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		db := openPool(t, k)
		drv := entlock.Wrap(entsql.OpenDB(k.Dialect(), db), ormlock.WithNamespace("tenant:a"))
		wrapErr := drv.Err()
		if !errors.Is(wrapErr, ormlock.ErrInvalidKey) {
			t.Fatalf("Err() = %v, want ErrInvalidKey", wrapErr)
		}
		client := ent.NewClient(ent.Driver(drv))
		var events atomic.Int32
		obs := ormlock.WithObserver(ormlock.ObserverFunc(func(context.Context, ormlock.Event) { events.Add(1) }))
		name := "failclosed-" + t.Name()
		called := false
		fn := func(*ent.Tx) error { called = true; return nil }
		sfn := func(context.Context) error { called = true; return nil }
		for _, c := range []struct {
			verb string
			err  error
		}{
			{"Transaction", entlock.Transaction(ctx, client, name, fn, obs)},
			{"Session", entlock.Session(ctx, client, name, sfn, obs)},
			{"Session on the driver", entlock.Session(ctx, drv, name, sfn, obs)},
			{"RunOnce", entlock.RunOnce(ctx, client, name, testdb.Slot(0), fn, obs)},
			{"RunOnce claim", entlock.RunOnce(ctx, client, name, testdb.Slot(0), fn, obs, ormlock.WithClaim())},
			{"Migrate", entlock.Migrate(ctx, client, obs)},
			{"Runs", func() error { _, err := entlock.Runs(ctx, client, name, 1, obs); return err }()},
			{"Holder", func() error { _, err := entlock.Holder(ctx, client, name, obs); return err }()},
		} {
			if !errors.Is(c.err, wrapErr) {
				t.Errorf("%s: %v, want Err() %v", c.verb, c.err, wrapErr)
			}
		}
		if called {
			t.Error("fn called")
		}
		if n := events.Load(); n != 0 {
			t.Errorf("%d observer events: a lock was tried", n)
		}
		if !rawFree(t, k, name) {
			t.Error("lock held after the calls")
		}
		// ent itself still works through the wrapper
		if _, err := client.Item.Query().Count(ctx); err != nil {
			t.Fatalf("plain query: %v", err)
		}
	})
}
