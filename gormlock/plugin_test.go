package gormlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	"gorm.io/gorm/utils/tests"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/gormtest"
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

// The plugin: refused on a dialect ormlock does not support and with an
// invalid option; its options (here the namespace) are the defaults of
// every call, and a per-call option overrides them.
func TestPlugin(t *testing.T) {
	t.Run("unsupported dialect", func(t *testing.T) {
		db, err := gorm.Open(tests.DummyDialector{}, &gorm.Config{Logger: logger.Discard})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Use(gormlock.New()); !errors.Is(err, ormlock.ErrUnsupportedDialect) {
			t.Fatalf("Use on dummy dialect: %v", err)
		}
		if err := gormlock.Transaction(db, "k", func(*gorm.DB) error { return nil }); !errors.Is(err, ormlock.ErrUnsupportedDialect) {
			t.Fatalf("Transaction on dummy dialect: %v", err)
		}
	})
	t.Run("invalid option", func(t *testing.T) {
		db, _ := gormtest.Open(t, testdb.Postgres)
		if err := db.Use(gormlock.New(ormlock.WithLedgerTable("runs; DROP"))); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Fatalf("Use with bad table: %v", err)
		}
	})
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := gormtest.Open(t, k)
		if err := db.Use(gormlock.New(ormlock.WithNamespace("billing"), ormlock.WithWait(5*time.Second))); err != nil {
			t.Fatal(err)
		}
		name := "plugin-" + t.Name()
		err := gormlock.Transaction(db, name, func(*gorm.DB) error {
			// the plugin's namespace applies: the plain name is free, the
			// namespaced key is held
			if !rawFree(t, k, name) {
				return errors.New("plain name held: namespace not applied")
			}
			if rawFreeNS(t, k, "billing", name) {
				return errors.New("namespaced key is free")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// per-call options override the plugin's
		err = gormlock.Transaction(db, name, func(*gorm.DB) error {
			if rawFree(t, k, name) {
				return errors.New("per-call empty namespace not applied")
			}
			return nil
		}, ormlock.WithNamespace(""))
		if err != nil {
			t.Fatal(err)
		}
	})
}

// The plugin's ledger table applies to Migrate, RunOnce and Runs (Migrate
// itself is in internal/conformance).
func TestMigratePluginTable(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := gormtest.Open(t, k)
		pname := testdb.TableName(t, "p")
		t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + pname) })
		pdb, _ := gormtest.Open(t, k)
		if err := pdb.Use(gormlock.New(ormlock.WithLedgerTable(pname))); err != nil {
			t.Fatal(err)
		}
		if err := gormlock.Migrate(pdb); err != nil {
			t.Fatal(err)
		}
		job := "plugin-" + t.Name()
		if err := gormlock.RunOnce(pdb, job, testdb.Slot(0), func(*gorm.DB) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if rs, err := gormlock.Runs(pdb, job, 5); err != nil || len(rs) != 1 {
			t.Fatalf("Runs via the plugin's table: %v %v", rs, err)
		}
		if rs := runs(t, db, pname, job); len(rs) != 1 {
			t.Fatalf("row not in the plugin's table: %v", rs)
		}
	})
}
