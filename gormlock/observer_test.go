package gormlock_test

import (
	"testing"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/gormtest"
	"github.com/ormlock/ormlock/internal/testdb"
)

// pluginEvents checks that r saw attempt, acquired and released for key in
// namespace ns, in that order, and nothing else.
func pluginEvents(t *testing.T, r *testdb.Recorder, key, ns string) {
	t.Helper()
	es := r.Events()
	if got := r.Take(); got != "attempt,acquired,released" {
		t.Fatalf("events %s, want attempt,acquired,released", got)
	}
	for _, e := range es {
		if e.Key != ormlock.Name(key) || e.Namespace != ns || e.Verb != "Transaction" {
			t.Errorf("%v event: key=%v ns=%q verb=%q, want %q %q Transaction", e.Kind, e.Key, e.Namespace, e.Verb, key, ns)
		}
	}
}

// The events of Transaction and Session in every outcome (acquired, not
// acquired, fn error, panic, key forms, unreachable database, ended
// context, contention, a failed release on MariaDB, a lost Session) are
// tested once for every adapter, in internal/conformance (observer_test.go).
// What stays here is GORM's: the plugin's default observer.

func TestObserverPluginDefault(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := gormtest.Open(t, k)
		plugin, perCall := &testdb.Recorder{}, &testdb.Recorder{}
		if err := db.Use(gormlock.New(ormlock.WithObserver(plugin), ormlock.WithNamespace("obsplugin"))); err != nil {
			t.Fatal(err)
		}
		key := "obs-plugin-" + t.Name()
		if err := gormlock.Transaction(db, key, func(*gorm.DB) error { return nil }); err != nil {
			t.Fatal(err)
		}
		pluginEvents(t, plugin, key, "obsplugin")

		// a per-call observer replaces the plugin's
		plugin.Reset()
		if err := gormlock.Transaction(db, key, func(*gorm.DB) error { return nil }, ormlock.WithObserver(perCall)); err != nil {
			t.Fatal(err)
		}
		pluginEvents(t, perCall, key, "obsplugin")
		if got := plugin.Take(); got != "" {
			t.Fatalf("plugin observer also got %s", got)
		}
		// and WithObserver(nil) turns it off for one call
		if err := gormlock.Transaction(db, key, func(*gorm.DB) error { return nil }, ormlock.WithObserver(nil)); err != nil {
			t.Fatal(err)
		}
		if got := plugin.Take(); got != "" {
			t.Fatalf("WithObserver(nil): plugin observer got %s", got)
		}
	})
}
