package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// Two services use one semaphore key with different n: the one with the
// smaller n, finding its slots held, learns from the statement that tries
// its last slot that slot n+1 is held too, and says so in an
// EventSemaphoreMismatch before its not_acquired; with its own n the only
// one in use it says nothing.
func TestSemaphoreMismatchEvent(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		l := a.open(t, k)
		shapeVerbs(t, k, l, func(t *testing.T, run func(context.Context, ormlock.Key, func(context.Context) error, ...ormlock.Option) error) {
			ctx := context.Background()
			name := uniq(t, "mm")[0]
			// the other service: Semaphore(name, 4), every slot held
			for i := range 4 {
				h := holdBG(t, func(fn func(context.Context) error) error {
					return l.Session(ctx, ormlock.Semaphore(name, 4), fn)
				})
				h.waitHeld(t, fmt.Sprintf("holder %d of Semaphore(4)", i+1))
			}
			var rec testdb.Recorder
			err := run(ctx, ormlock.Semaphore(name, 3), func(context.Context) error {
				t.Error("fn ran with every slot held")
				return nil
			}, ormlock.WithObserver(&rec))
			if !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Fatalf("Semaphore(3) with 4 slots held: %v, want ErrNotAcquired", err)
			}
			if got := rec.Take(); got != "attempt,semaphore_mismatch,not_acquired" {
				t.Fatalf("events %q, want attempt,semaphore_mismatch,not_acquired", got)
			}

			// its own n only: no event
			other := uniq(t, "own")[0]
			slots := make([]string, 3)
			for i := range slots {
				slots[i] = fmt.Sprintf("ormlock.semaphore:%s#%d", other, i+1)
			}
			holdOn(t, k, slots)
			err = run(ctx, ormlock.Semaphore(other, 3), func(context.Context) error {
				t.Error("fn ran with every slot held")
				return nil
			}, ormlock.WithObserver(&rec), ormlock.WithWait(300*time.Millisecond))
			if !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Fatalf("Semaphore(3) with its 3 slots held: %v, want ErrNotAcquired", err)
			}
			if got := rec.Take(); got != "attempt,not_acquired" {
				t.Fatalf("events %q, want attempt,not_acquired", got)
			}
		})
	})
}

// The event names the key and the slot it saw held.
func TestSemaphoreMismatchEventErr(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
		t.Run(string(k), func(t *testing.T) {
			r := sqlWith(t, k)
			name := uniq(t, "mmerr")[0]
			holdOn(t, k, []string{"ormlock.semaphore:" + name + "#1", "ormlock.semaphore:" + name + "#2"})
			var rec testdb.Recorder
			err := r.Transaction(context.Background(), ormlock.Semaphore(name, 1), func(txn) error { return nil }, ormlock.WithObserver(&rec))
			if !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Fatalf("Semaphore(1) with slots 1 and 2 held: %v", err)
			}
			for _, e := range rec.Events() {
				if e.Kind != ormlock.EventSemaphoreMismatch {
					continue
				}
				if msg := fmt.Sprint(e.Err); !strings.Contains(msg, "slot 2") || !strings.Contains(msg, name) || e.Key != ormlock.Semaphore(name, 1) {
					t.Errorf("event %v: err %q", e.Key, msg)
				}
				return
			}
			t.Fatalf("no semaphore_mismatch in %v", rec.Kinds())
		})
	}
}
