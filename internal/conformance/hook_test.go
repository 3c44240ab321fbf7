package conformance_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// hookKey is the context key under which the test hook's Start leaves its
// mark.
type hookKey struct{}

// hook records the calls of an ormlock.Hook: one Start and one End per
// lock use, End with the context Start returned.
type hook struct {
	mu     sync.Mutex
	starts []ormlock.Event
	ends   []ormlock.Event
	endCtx []context.Context
}

func (h *hook) Start(ctx context.Context, e ormlock.Event) context.Context {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.starts = append(h.starts, e)
	return context.WithValue(ctx, hookKey{}, true)
}

func (h *hook) End(ctx context.Context, e ormlock.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ends = append(h.ends, e)
	h.endCtx = append(h.endCtx, ctx)
}

// take returns the calls since the last take: one start and one end
// wanted, End's kind end and error matching wantErr, End's context the one
// Start returned.
func (h *hook) take(t *testing.T, what string, end ormlock.EventKind, wantErr error) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	defer func() { h.starts, h.ends, h.endCtx = nil, nil, nil }()
	if len(h.starts) != 1 || len(h.ends) != 1 {
		t.Fatalf("%s: %d starts and %d ends, want one each", what, len(h.starts), len(h.ends))
	}
	if h.starts[0].Kind != ormlock.EventAttempt || h.ends[0].Kind != end {
		t.Errorf("%s: start %v, end %v; want attempt and %v", what, h.starts[0].Kind, h.ends[0].Kind, end)
	}
	if wantErr == nil && h.ends[0].Err != nil || wantErr != nil && !errors.Is(h.ends[0].Err, wantErr) {
		t.Errorf("%s: End's error %v, want %v", what, h.ends[0].Err, wantErr)
	}
	if h.endCtx[0].Value(hookKey{}) != true {
		t.Errorf("%s: End did not get the context Start returned", what)
	}
}

// TestConformanceHook: WithHook's Start and End frame every Transaction,
// Session and RunOnce, on every adapter and server; fn runs under the
// context Start returned (ent's fn gets no context: its lock statements
// do); an observer set beside it still gets every event.
func TestConformanceHook(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r := openRunner(t, a, k)
		h := &hook{}
		rec := &testdb.Recorder{}
		opts := []ormlock.Option{ormlock.WithHook(h), ormlock.WithObserver(rec)}
		key := "conf-hook-" + t.Name()
		marked := func(c context.Context) bool { return a.name == "entlock" || c.Value(hookKey{}) == true }

		if err := r.Transaction(ctx, key, func(tx txn) error {
			if !marked(tx.Context()) {
				t.Error("Transaction: fn's context is not Start's")
			}
			return nil
		}, opts...); err != nil {
			t.Fatal(err)
		}
		h.take(t, "Transaction", ormlock.EventReleased, nil)
		if got := rec.Take(); got != "attempt,acquired,released" {
			t.Errorf("Transaction: observer saw %s", got)
		}

		boom := errors.New("boom")
		if err := r.Session(ctx, key, func(ctx context.Context) error {
			if ctx.Value(hookKey{}) != true {
				t.Error("Session: fn's context is not Start's")
			}
			return boom
		}, opts...); !errors.Is(err, boom) {
			t.Fatalf("Session: %v", err)
		}
		h.take(t, "Session", ormlock.EventReleased, boom)

		tbl := ledgerTable(t, k, r)
		job := "hook-" + t.Name()
		for range 2 {
			_ = r.RunOnce(ctx, job, testdb.Slot(0), func(txn) error { return nil }, append(opts, ormlock.WithLedgerTable(tbl))...)
		}
		h.mu.Lock()
		n := len(h.starts)
		h.mu.Unlock()
		if n != 2 {
			t.Fatalf("RunOnce twice: %d starts", n)
		}
		h.mu.Lock()
		h.starts, h.ends, h.endCtx = h.starts[1:], h.ends[1:], h.endCtx[1:]
		h.mu.Unlock()
		h.take(t, "RunOnce, done", ormlock.EventReleased, ormlock.ErrAlreadyDone)
		rec.Take()

		release := testdb.RawHold(t, k, "", key)
		defer release()
		if err := r.Transaction(ctx, key, func(txn) error { return nil }, opts...); !errors.Is(err, ormlock.ErrNotAcquired) {
			t.Fatalf("held elsewhere: %v", err)
		}
		h.take(t, "Transaction, held", ormlock.EventNotAcquired, ormlock.ErrNotAcquired)
	})
}
