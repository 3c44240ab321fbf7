package gormlock_test

import (
	"fmt"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/gormtest"
	"github.com/ormlock/ormlock/internal/testdb"
)

func obsKinds(es []ormlock.Event) []ormlock.EventKind {
	out := make([]ormlock.EventKind, len(es))
	for i, e := range es {
		out[i] = e.Kind
	}
	return out
}

// obsExpect checks that r saw exactly the events kinds, in order, all for
// verb on key in namespace ns on k's dialect, and returns them. Wait and
// Held must never be negative, and are zero on the events that do not
// carry them.
func obsExpect(t *testing.T, r *testdb.Recorder, k testdb.Kind, verb string, key ormlock.Key, ns string, kinds ...ormlock.EventKind) []ormlock.Event {
	t.Helper()
	es := r.Events()
	if fmt.Sprint(obsKinds(es)) != fmt.Sprint(kinds) {
		t.Fatalf("events %v, want %v", obsKinds(es), kinds)
	}
	for _, e := range es {
		if e.Verb != verb || e.Dialect != k.Dialect() || e.Key != key || e.Namespace != ns {
			t.Errorf("%v event: verb=%q dialect=%q key=%v ns=%q, want %q %q %v %q", e.Kind, e.Verb, e.Dialect, e.Key, e.Namespace, verb, k.Dialect(), key, ns)
		}
		if e.Wait < 0 || e.Held < 0 {
			t.Errorf("%v event: negative wait %v or held %v", e.Kind, e.Wait, e.Held)
		}
		switch e.Kind {
		case ormlock.EventAcquired, ormlock.EventNotAcquired:
			if e.Held != 0 {
				t.Errorf("%v event carries held %v", e.Kind, e.Held)
			}
			if e.Wait > time.Hour {
				t.Errorf("%v event: wait %v, measured from no attempt", e.Kind, e.Wait)
			}
		case ormlock.EventReleased, ormlock.EventReleaseFailed, ormlock.EventLockLost:
			if e.Wait != 0 {
				t.Errorf("%v event carries wait %v", e.Kind, e.Wait)
			}
		default:
			if e.Wait != 0 || e.Held != 0 {
				t.Errorf("%v event carries wait %v / held %v", e.Kind, e.Wait, e.Held)
			}
		}
		switch e.Kind {
		case ormlock.EventReleaseFailed, ormlock.EventLockLost:
			if e.Err == nil {
				t.Errorf("%v event without an error", e.Kind)
			}
		case ormlock.EventNotAcquired:
		default:
			if e.Err != nil {
				t.Errorf("%v event with error %v", e.Kind, e.Err)
			}
		}
	}
	return es
}

const (
	evAttempt       = ormlock.EventAttempt
	evAcquired      = ormlock.EventAcquired
	evNotAcquired   = ormlock.EventNotAcquired
	evReleased      = ormlock.EventReleased
	evReleaseFailed = ormlock.EventReleaseFailed
	evLockLost      = ormlock.EventLockLost
)

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
		obsExpect(t, plugin, k, "Transaction", ormlock.Name(key), "obsplugin", evAttempt, evAcquired, evReleased)

		// a per-call observer replaces the plugin's
		plugin.Reset()
		if err := gormlock.Transaction(db, key, func(*gorm.DB) error { return nil }, ormlock.WithObserver(perCall)); err != nil {
			t.Fatal(err)
		}
		obsExpect(t, perCall, k, "Transaction", ormlock.Name(key), "obsplugin", evAttempt, evAcquired, evReleased)
		if es := plugin.Events(); len(es) != 0 {
			t.Fatalf("plugin observer also got %v", obsKinds(es))
		}
		// and WithObserver(nil) turns it off for one call
		if err := gormlock.Transaction(db, key, func(*gorm.DB) error { return nil }, ormlock.WithObserver(nil)); err != nil {
			t.Fatal(err)
		}
		if es := plugin.Events(); len(es) != 0 {
			t.Fatalf("WithObserver(nil): plugin observer got %v", obsKinds(es))
		}
	})
}
