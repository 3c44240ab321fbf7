package gormlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/gormtest"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
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

func TestObserverTransaction(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := gormtest.Open(t, k)
		rec := &testdb.Recorder{}
		obs := ormlock.WithObserver(rec)

		t.Run("acquired and released", func(t *testing.T) {
			rec.Reset()
			key := "obs-ok-" + t.Name()
			var fnTook time.Duration
			err := gormlock.Transaction(db, key, func(tx *gorm.DB) error {
				start := time.Now()
				if got := obsKinds(rec.Events()); fmt.Sprint(got) != fmt.Sprint([]ormlock.EventKind{evAttempt, evAcquired}) {
					return fmt.Errorf("events inside fn: %v, want attempt, acquired", got)
				}
				err := tx.Exec("SELECT 1").Error
				time.Sleep(20 * time.Millisecond)
				fnTook = time.Since(start)
				return err
			}, obs)
			if err != nil {
				t.Fatal(err)
			}
			es := obsExpect(t, rec, k, "Transaction", ormlock.Name(key), "", evAttempt, evAcquired, evReleased)
			// the hold spans fn: acquired before fn started, released after
			// it returned (both measured on the monotonic clock)
			if es[2].Held < fnTook {
				t.Errorf("held %v shorter than fn's own %v", es[2].Held, fnTook)
			}
			t.Logf("wait %v, held %v, fn %v", es[1].Wait, es[2].Held, fnTook)
		})

		t.Run("not acquired", func(t *testing.T) {
			rec.Reset()
			key := "obs-held-" + t.Name()
			release := rawHold(t, k, key)
			defer release()
			err := gormlock.Transaction(db, key, func(*gorm.DB) error { return errors.New("fn called") }, obs)
			if !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Fatalf("err = %v, want ErrNotAcquired", err)
			}
			es := obsExpect(t, rec, k, "Transaction", ormlock.Name(key), "", evAttempt, evNotAcquired)
			if es[1].Err != nil {
				t.Errorf("not_acquired (held elsewhere) carries err %v", es[1].Err)
			}

			rec.Reset()
			err = gormlock.Transaction(db, key, func(*gorm.DB) error { return errors.New("fn called") }, obs, ormlock.WithWait(150*time.Millisecond))
			if !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Fatalf("wait: err = %v, want ErrNotAcquired", err)
			}
			es = obsExpect(t, rec, k, "Transaction", ormlock.Name(key), "", evAttempt, evNotAcquired)
			if es[1].Err != nil {
				t.Errorf("not_acquired (wait ran out) carries err %v", es[1].Err)
			}
			t.Logf("not_acquired after a 150ms wait: wait=%v", es[1].Wait)

			rec.Reset()
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
			defer cancel()
			err = gormlock.Transaction(db.WithContext(ctx), key, func(*gorm.DB) error { return errors.New("fn called") }, obs, ormlock.WithWait(time.Minute))
			if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("deadline: err = %v", err)
			}
			es = obsExpect(t, rec, k, "Transaction", ormlock.Name(key), "", evAttempt, evNotAcquired)
			if !errors.Is(es[1].Err, context.DeadlineExceeded) {
				t.Errorf("not_acquired at the context deadline carries err %v, want DeadlineExceeded", es[1].Err)
			}
		})

		t.Run("fn error", func(t *testing.T) {
			rec.Reset()
			key := "obs-fnerr-" + t.Name()
			boom := errors.New("boom")
			if err := gormlock.Transaction(db, key, func(*gorm.DB) error { return boom }, obs); err != boom {
				t.Fatalf("err = %v, want fn's", err)
			}
			obsExpect(t, rec, k, "Transaction", ormlock.Name(key), "", evAttempt, evAcquired, evReleased)
		})

		t.Run("panic", func(t *testing.T) {
			rec.Reset()
			key := "obs-panic-" + t.Name()
			var got any
			func() {
				defer func() { got = recover() }()
				_ = gormlock.Transaction(db, key, func(*gorm.DB) error { panic("kaboom") }, obs)
			}()
			if got != "kaboom" {
				t.Fatalf("recovered %v", got)
			}
			obsExpect(t, rec, k, "Transaction", ormlock.Name(key), "", evAttempt, evAcquired, evReleased)
			if !rawFree(t, k, key) {
				t.Fatal("lock held after panic")
			}
		})

		t.Run("namespace and key forms", func(t *testing.T) {
			rec.Reset()
			id := keyhash.Int64("obs-id-" + t.Name())
			if err := gormlock.Transaction(db, id, func(*gorm.DB) error { return nil }, obs, ormlock.WithNamespace("obsns")); err != nil {
				t.Fatal(err)
			}
			obsExpect(t, rec, k, "Transaction", ormlock.ID(id), "obsns", evAttempt, evAcquired, evReleased)
		})

		t.Run("database unreachable", func(t *testing.T) {
			// a pool that cannot hand out a connection: the verb fails
			// before the lock call, and the observer still hears of it
			closed := testdb.Open(t, k)
			cdb := gormtest.On(t, k.Dialect(), closed)
			closed.Close()
			rec.Reset()
			key := "obs-closed-" + t.Name()
			err := gormlock.Transaction(cdb, key, func(*gorm.DB) error { return errors.New("fn called") }, obs)
			if err == nil {
				t.Fatal("no error on a closed pool")
			}
			es := obsExpect(t, rec, k, "Transaction", ormlock.Name(key), "", evAttempt, evNotAcquired)
			if es[1].Err == nil {
				t.Errorf("not_acquired carries err %v, want the pool's error", es[1].Err)
			}
			t.Logf("closed pool: err=%v; event err=%v", err, es[1].Err)
		})

		t.Run("context already ended", func(t *testing.T) {
			// the transaction cannot even begin: still a not_acquired, and
			// the error matches both ErrNotAcquired and the context's
			rec.Reset()
			key := "obs-cancelled-" + t.Name()
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			err := gormlock.Transaction(db.WithContext(ctx), key, func(*gorm.DB) error { return errors.New("fn called") }, obs)
			if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want ErrNotAcquired and context.Canceled", err)
			}
			es := obsExpect(t, rec, k, "Transaction", ormlock.Name(key), "", evAttempt, evNotAcquired)
			if !errors.Is(es[1].Err, context.Canceled) {
				t.Errorf("not_acquired carries err %v, want context.Canceled", es[1].Err)
			}
		})

		t.Run("no observer", func(t *testing.T) {
			rec.Reset()
			if err := gormlock.Transaction(db, "obs-none-"+t.Name(), func(*gorm.DB) error { return nil }); err != nil {
				t.Fatal(err)
			}
			if es := rec.Events(); len(es) != 0 {
				t.Fatalf("events without an observer: %v", obsKinds(es))
			}
		})
	})
}

// Many goroutines share one observer: every attempt ends in exactly one
// not_acquired or one acquired, and every acquired in exactly one released.
func TestObserverTransactionContention(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		const workers, rounds = 4, 15
		rec := &testdb.Recorder{}
		dbs := make([]*gorm.DB, workers)
		for i := range dbs {
			dbs[i], _ = gormtest.Open(t, k)
		}
		key := "obs-contention-" + t.Name()
		var mu sync.Mutex
		wins, losses := 0, 0
		for range rounds {
			var wg sync.WaitGroup
			for _, db := range dbs {
				wg.Go(func() {
					err := gormlock.Transaction(db, key, func(tx *gorm.DB) error {
						time.Sleep(2 * time.Millisecond)
						return tx.Exec("SELECT 1").Error
					}, ormlock.WithObserver(rec))
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						wins++
					case errors.Is(err, ormlock.ErrNotAcquired):
						losses++
					default:
						t.Errorf("unexpected error: %v", err)
					}
				})
			}
			wg.Wait()
		}
		att, acq, rel, na := rec.Count(evAttempt), rec.Count(evAcquired), rec.Count(evReleased), rec.Count(evNotAcquired)
		t.Logf("%d calls: %d wins, %d losses; events attempt=%d acquired=%d released=%d not_acquired=%d", workers*rounds, wins, losses, att, acq, rel, na)
		if att != workers*rounds || acq != wins || rel != wins || na != losses {
			t.Fatalf("events do not match outcomes: attempt=%d acquired=%d released=%d not_acquired=%d, wins=%d losses=%d",
				att, acq, rel, na, wins, losses)
		}
		if len(rec.Events()) != att+acq+rel+na {
			t.Fatalf("unexpected event kinds: %v", obsKinds(rec.Events()))
		}
	})
}

func TestObserverReleaseFailureMariaDB(t *testing.T) {
	k := testdb.MariaDB
	db, _ := gormtest.Open(t, k)
	rec := &testdb.Recorder{}
	key := "obs-relfail-" + t.Name()
	err := gormlock.Transaction(db, key, func(tx *gorm.DB) error {
		// release the lock behind ormlock's back: its RELEASE_LOCK then
		// returns NULL
		return tx.Exec("SELECT RELEASE_LOCK(?)", keyhash.MySQLName("", key)).Error
	}, ormlock.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	es := obsExpect(t, rec, k, "Transaction", ormlock.Name(key), "", evAttempt, evAcquired, evReleaseFailed)
	if !errors.Is(es[2].Err, lockproto.ErrNotHeld) {
		t.Errorf("release_failed err = %v, want one wrapping lockproto.ErrNotHeld", es[2].Err)
	}
	t.Logf("release_failed: held=%v err=%v", es[2].Held, es[2].Err)
}

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
