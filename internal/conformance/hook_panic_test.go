package conformance_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// boom is what fn panics with: a pointer, so that the caller's recover
// can be checked to get the very value fn raised.
type boom struct{ verb string }

// panicVerb is one verb call that runs in(ctx) inside fn, with opts.
type panicVerb struct {
	name string
	call func(ctx context.Context, in func(ctx context.Context), opts ...ormlock.Option) error
}

// panicVerbs are every verb of r that calls the hook, with each kind of
// key and connection: Transaction and Session on a key, on an All set
// and (Session) on a Semaphore, Session on a shared lock connection (not
// behind PgBouncer, which refuses them), RunOnce in both modes,
// RunScheduled, Lead.
func panicVerbs(t *testing.T, a adapter, k testdb.Kind, r runner) []panicVerb {
	tbl := ledgerTable(t, k, r)
	key := "hook-panic-" + t.Name()
	set := ormlock.All(ormlock.Name(key+"/a"), ormlock.Name(key+"/b"))
	ld := leaderOf(t, a, r)
	jobs := 0
	job := func() string { jobs++; return "hook-panic-" + t.Name() + "-" + string(rune('a'+jobs)) }
	tx := func(key any) func(ctx context.Context, in func(context.Context), opts ...ormlock.Option) error {
		return func(ctx context.Context, in func(context.Context), opts ...ormlock.Option) error {
			return r.Transaction(ctx, key, func(tx txn) error { in(tx.Context()); return nil }, opts...)
		}
	}
	session := func(key any, more ...ormlock.Option) func(ctx context.Context, in func(context.Context), opts ...ormlock.Option) error {
		return func(ctx context.Context, in func(context.Context), opts ...ormlock.Option) error {
			return r.Session(ctx, key, func(ctx context.Context) error { in(ctx); return nil }, append(opts, more...)...)
		}
	}
	runOnce := func(more ...ormlock.Option) func(ctx context.Context, in func(context.Context), opts ...ormlock.Option) error {
		return func(ctx context.Context, in func(context.Context), opts ...ormlock.Option) error {
			return r.RunOnce(ctx, job(), testdb.Slot(0), func(tx txn) error { in(tx.Context()); return nil },
				append(opts, append(more, ormlock.WithLedgerTable(tbl))...)...)
		}
	}
	vs := []panicVerb{
		{"Transaction", tx(key)},
		{"Transaction/All", tx(set)},
		{"Session", session(key)},
		{"Session/All", session(set)},
		{"Session/Semaphore", session(ormlock.Semaphore(ormlock.Name(key), 2))},
		{"RunOnce", runOnce()},
		{"RunOnce/claim", runOnce(ormlock.WithClaim())},
		{"RunScheduled", func(ctx context.Context, in func(context.Context), opts ...ormlock.Option) error {
			every := &slotRecorder{slot: testdb.Slot(0)}
			return r.RunScheduled(ctx, job(), every, func(tx txn) error { in(tx.Context()); return nil }, append(opts, ormlock.WithLedgerTable(tbl))...)
		}},
		{"Lead", func(ctx context.Context, in func(context.Context), opts ...ormlock.Option) error {
			return ld.Lead(ctx, key, func(ctx context.Context) error { in(ctx); return nil }, opts...)
		}},
	}
	if k != testdb.PgBouncer {
		vs = append(vs,
			panicVerb{"Session/shared", session(key, ormlock.WithSharedLockConns(1))},
			panicVerb{"Session/All/shared", session(set, ormlock.WithSharedLockConns(1))})
	}
	return vs
}

// panicEnded checks that h saw one Start and one End for the call, End
// with the context Start returned and a *ormlock.PanicError as its Err
// (with want as its Value, or Goexit set when want is nil), and that the
// observer's events balance: every acquisition released. It forgets both.
func panicEnded(t *testing.T, h *hook, rec *testdb.Recorder, want any) {
	t.Helper()
	defer rec.Reset()
	h.mu.Lock()
	defer h.mu.Unlock()
	defer func() { h.starts, h.ends, h.endCtx = nil, nil, nil }()
	if len(h.starts) != 1 || len(h.ends) != 1 {
		t.Fatalf("%d starts and %d ends, want one each", len(h.starts), len(h.ends))
	}
	end := h.ends[0]
	var pe *ormlock.PanicError
	switch {
	case !errors.As(end.Err, &pe):
		t.Errorf("End's error %v (%T), want a *ormlock.PanicError", end.Err, end.Err)
	case want == nil && (!pe.Goexit || pe.Value != nil):
		t.Errorf("End's PanicError %+v, want Goexit", pe)
	case want != nil && (pe.Goexit || pe.Value != want):
		t.Errorf("End's PanicError %+v, want the value fn panicked with", pe)
	}
	if h.endCtx[0].Value(hookKey{}) != true {
		t.Error("End did not get the context Start returned")
	}
	if end.ID != h.starts[0].ID {
		t.Errorf("End's ID %d, Start's %d", end.ID, h.starts[0].ID)
	}
	acquired := rec.Count(ormlock.EventAcquired)
	ended := rec.Count(ormlock.EventReleased) + rec.Count(ormlock.EventReleaseFailed) + rec.Count(ormlock.EventLockLost)
	if acquired == 0 || acquired != ended || rec.Count(ormlock.EventReleased) != acquired {
		t.Errorf("observer saw %s: want every acquisition released", rec.Take())
	}
}

// TestConformanceHookPanic: when fn panics, every verb of every adapter
// rolls back and releases, calls the hook's End once with a
// *ormlock.PanicError carrying the panic's value, and the caller recovers
// that very value; when fn calls runtime.Goexit (t.FailNow), in a
// goroutine of its own, End gets a *ormlock.PanicError whose Goexit is
// set, and the goroutine ends without the verb returning.
func TestConformanceHookPanic(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		h := &hook{}
		rec := &testdb.Recorder{}
		opts := []ormlock.Option{ormlock.WithHook(h), ormlock.WithObserver(rec)}
		ctx := context.Background()
		for _, v := range panicVerbs(t, a, k, r) {
			want := &boom{v.name}
			got := func() (p any) {
				defer func() { p = recover() }()
				err := v.call(ctx, func(context.Context) { panic(want) }, opts...)
				t.Errorf("%s: returned %v after fn panicked", v.name, err)
				return nil
			}()
			if got != want {
				t.Errorf("%s: the caller recovered %v, want fn's panic value", v.name, got)
			}
			t.Run(v.name+"/panic", func(t *testing.T) { panicEnded(t, h, rec, want) })

			done := make(chan struct{})
			returned := false
			go func() {
				defer close(done)
				_ = v.call(ctx, func(context.Context) { runtime.Goexit() }, opts...)
				returned = true
			}()
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Fatalf("%s: the goroutine did not end", v.name)
			}
			if returned {
				t.Errorf("%s: returned after fn called runtime.Goexit", v.name)
			}
			t.Run(v.name+"/Goexit", func(t *testing.T) { panicEnded(t, h, rec, nil) })
		}
	})
}
