package gormlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/gormtest"
	"github.com/ormlock/ormlock/internal/testdb"
)

// A failed db.Use(gormlock.New(...)) fails closed: GORM does not register
// the plugin, and an application that ignores the error must not take its
// locks without the namespace it asked for. Every verb on that db (and on
// the sessions and transactions derived from it) returns the registration's
// error, without calling fn and without taking a lock.
func TestPluginFailsClosed(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := gormtest.Open(t, k)
		before := db.WithContext(context.Background()) // derived before the failure
		useErr := db.Use(gormlock.New(ormlock.WithNamespace("tenant:a")))
		if !errors.Is(useErr, ormlock.ErrInvalidKey) {
			t.Fatalf("Use with a namespace with a colon: %v", useErr)
		}
		var events atomic.Int32
		obs := ormlock.WithObserver(ormlock.ObserverFunc(func(context.Context, ormlock.Event) { events.Add(1) }))
		name := "failclosed-" + t.Name()
		slot := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
		called := false
		txFn := func(*gorm.DB) error { called = true; return nil }
		sessFn := func(context.Context) error { called = true; return nil }

		verbs := []struct {
			name string
			call func(db *gorm.DB) error
		}{
			{"Transaction", func(db *gorm.DB) error { return gormlock.Transaction(db, name, txFn, obs) }},
			{"Transaction ID", func(db *gorm.DB) error { return gormlock.Transaction(db, int64(42), txFn, obs) }},
			{"Session", func(db *gorm.DB) error { return gormlock.Session(db, name, sessFn, obs) }},
			{"RunOnce", func(db *gorm.DB) error { return gormlock.RunOnce(db, name, slot, txFn, obs) }},
			{"RunOnce claim", func(db *gorm.DB) error {
				return gormlock.RunOnce(db, name, slot, txFn, obs, ormlock.WithClaim())
			}},
			{"Migrate", func(db *gorm.DB) error { return gormlock.Migrate(db, obs) }},
			{"Runs", func(db *gorm.DB) error { _, err := gormlock.Runs(db, name, 10, obs); return err }},
			{"Holder", func(db *gorm.DB) error { _, err := gormlock.Holder(db, name, obs); return err }},
		}
		dbs := []struct {
			name string
			db   func(t *testing.T, f func(db *gorm.DB))
		}{
			{"db", func(_ *testing.T, f func(*gorm.DB)) { f(db) }},
			{"derived before", func(_ *testing.T, f func(*gorm.DB)) { f(before) }},
			{"WithContext", func(_ *testing.T, f func(*gorm.DB)) { f(db.WithContext(context.Background())) }},
			{"Session", func(_ *testing.T, f func(*gorm.DB)) { f(db.Session(&gorm.Session{})) }},
			{"in a transaction", func(t *testing.T, f func(*gorm.DB)) {
				if err := db.Transaction(func(tx *gorm.DB) error { f(tx); return nil }); err != nil {
					t.Fatalf("outer transaction: %v", err)
				}
			}},
		}
		for _, d := range dbs {
			for _, v := range verbs {
				d.db(t, func(db *gorm.DB) {
					called = false
					err := v.call(db)
					if !errors.Is(err, ormlock.ErrInvalidKey) || err.Error() != useErr.Error() {
						t.Errorf("%s on %s: got %v, want the registration's error %v", v.name, d.name, err, useErr)
					}
					if called {
						t.Errorf("%s on %s: fn was called", v.name, d.name)
					}
				})
			}
		}
		if n := events.Load(); n != 0 {
			t.Errorf("%d observer events: a lock was tried", n)
		}
		if !rawFree(t, k, name) {
			t.Error("lock held after the calls")
		}
		// A registration that succeeds later clears the failure.
		if err := db.Use(gormlock.New(ormlock.WithNamespace("tenant-a"))); err != nil {
			t.Fatalf("Use with a valid namespace after the failure: %v", err)
		}
		err := gormlock.Transaction(db, name, func(*gorm.DB) error {
			if rawFreeNS(t, k, "tenant-a", name) {
				return errors.New("the valid plugin's namespace is not applied")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
