package entlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	entsql "entgo.io/ent/dialect/sql"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/enttest"
	"github.com/ormlock/ormlock/internal/enttest/ent"
	"github.com/ormlock/ormlock/internal/testdb"
)

// A Wrap with an invalid option fails closed: an application that never
// checks drv.Err() must not take its locks without the namespace it asked
// for. Every verb, through the client or the driver, returns Err() without
// calling fn and without taking a lock; ent's own use of the driver works.
func TestWrapFailsClosed(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		db := testdb.Open(t, k)
		enttest.Migrate(t, k)
		t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
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
