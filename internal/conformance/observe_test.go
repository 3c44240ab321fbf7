package conformance_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// Every verb reports the same events in the same order on every adapter.
func TestConformanceEvents(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r := openRunner(t, a, k)
		rec := &testdb.Recorder{}
		obs := ormlock.WithObserver(rec)
		key := "conf-events-" + t.Name()
		want := func(what, kinds string) {
			t.Helper()
			if got := rec.Take(); got != kinds {
				t.Fatalf("%s: events %s, want %s", what, got, kinds)
			}
		}
		_ = r.Transaction(ctx, key, func(txn) error { return nil }, obs)
		want("Transaction", "attempt,acquired,released")
		_ = r.Transaction(ctx, key, func(txn) error { return errors.New("x") }, obs)
		want("Transaction, fn error", "attempt,acquired,released")
		func() {
			defer func() { _ = recover() }()
			_ = r.Transaction(ctx, key, func(txn) error { panic("p") }, obs)
		}()
		want("Transaction, panic", "attempt,acquired,released")
		_ = r.Session(ctx, key, func(context.Context) error { return nil }, obs)
		want("Session", "attempt,acquired,released")

		tbl := ledgerTable(t, k, r)
		job := "events-" + t.Name()
		for range 2 {
			_ = r.RunOnce(ctx, job, testdb.Slot(0), func(txn) error { return nil }, obs, ormlock.WithLedgerTable(tbl))
		}
		want("RunOnce twice", "attempt,acquired,released,attempt,acquired,already_done,released")

		release := testdb.RawHold(t, k, "", key)
		defer release()
		if err := r.Transaction(ctx, key, func(txn) error { return nil }, obs); !errors.Is(err, ormlock.ErrNotAcquired) {
			t.Fatalf("held elsewhere: %v", err)
		}
		want("Transaction, held", "attempt,not_acquired")
		_ = r.Session(ctx, key, func(context.Context) error { return nil }, obs)
		want("Session, held", "attempt,not_acquired")
	})
}
