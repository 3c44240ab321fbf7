package lockproto

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
)

// Tests of the deadline rules (deadline.go), without a server. Orderings
// are by channels; the only waits are the grace periods themselves, which
// the rules promise.

type ctxKey struct{}

// pastDeadline is a context whose deadline has passed but whose timer has
// not fired yet: Err is nil, Done never closes.
type pastDeadline struct{ context.Context }

func (pastDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// cancelled is a context that has been cancelled.
var cancelled = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

func TestBudget(t *testing.T) {
	for _, c := range []struct {
		name        string
		wait        time.Duration
		ctx         func(t *testing.T) context.Context
		maxWait     time.Duration // the budget is in (0, maxWait], or 0 when maxWait is
		bounded     bool
		errIs       error
		wantNoError bool
	}{
		{"try once", 0, background, 0, false, nil, true},
		{"the configured wait", 5 * time.Second, background, 5 * time.Second, false, nil, true},
		{"a later deadline leaves the wait", 5 * time.Second, deadlineIn(time.Hour), 5 * time.Second, false, nil, true},
		{"an earlier deadline cuts it", time.Hour, deadlineIn(time.Minute), time.Minute, true, nil, true},
		{"try once ignores the deadline", 0, deadlineIn(time.Minute), 0, false, nil, true},
		{"a deadline passed", time.Hour, func(*testing.T) context.Context { return pastDeadline{context.Background()} }, 0, false, context.DeadlineExceeded, false},
		{"a cancelled context", time.Hour, func(*testing.T) context.Context { return cancelled }, 0, false, context.Canceled, false},
		{"a cancelled context, try once", 0, func(*testing.T) context.Context { return cancelled }, 0, false, context.Canceled, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			o, err := NewOp(Postgres, "Transaction", keys.Name("budget"), config.New(ormlock.WithWait(c.wait)))
			if err != nil {
				t.Fatal(err)
			}
			wait, bounded, err := o.budget(c.ctx(t))
			if !c.wantNoError {
				if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, c.errIs) {
					t.Fatalf("budget: %v, want ErrNotAcquired and %v", err, c.errIs)
				}
				return
			}
			if err != nil || bounded != c.bounded || wait > c.maxWait || (c.maxWait > 0) != (wait > 0) {
				t.Fatalf("budget = %v, %v, %v; want at most %v, bounded %v", wait, bounded, err, c.maxWait, c.bounded)
			}
		})
	}
}

func background(*testing.T) context.Context { return context.Background() }

func deadlineIn(d time.Duration) func(t *testing.T) context.Context {
	return func(t *testing.T) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		t.Cleanup(cancel)
		return ctx
	}
}

func TestCtxErr(t *testing.T) {
	for _, c := range []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"never ends", context.Background(), nil},
		{"cancelled", cancelled, context.Canceled},
		{"deadline passed, timer not fired", pastDeadline{context.Background()}, context.DeadlineExceeded},
	} {
		if got := ctxErr(c.ctx); !errors.Is(got, c.want) || (got == nil) != (c.want == nil) {
			t.Errorf("%s: ctxErr = %v, want %v", c.name, got, c.want)
		}
	}
}

// A context that never ends is used as it is by every rule: nothing to
// detach from, no cancel to arm, no timer.
func TestDeadlineRulesNeverEndingContext(t *testing.T) {
	ctx := context.WithValue(context.Background(), ctxKey{}, "v")
	if wctx, done := waitCtx(ctx); wctx != ctx {
		t.Error("waitCtx wrapped a context that never ends")
	} else {
		done()
	}
	if txCtx, cancel := txContext(ctx); txCtx != ctx {
		t.Error("txContext wrapped a context that never ends")
	} else {
		cancel()
	}
	if stop := bound(ctx, func() { t.Error("bound cancelled") }); !stop() {
		t.Error("bound's stop reported the context ended")
	}
	if rctx, cancel := txReleaseCtx(ctx); rctx != ctx {
		t.Error("txReleaseCtx bounded a context that never ends")
	} else {
		cancel()
	}
	called := false
	if err := withinGrace(ctx, func() { t.Error("withinGrace cancelled") }, func() error { called = true; return nil }); err != nil || !called {
		t.Errorf("withinGrace: %v, called %v", err, called)
	}
}

// waitCtx: an explicit cancellation interrupts the lock statement at once;
// a deadline only deadlineGrace later (the server bounds the wait itself);
// done ends it either way. Values are kept.
func TestWaitCtx(t *testing.T) {
	t.Parallel()
	t.Run("cancel", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
		wctx, done := waitCtx(ctx)
		defer done()
		if wctx.Value(ctxKey{}) != "v" {
			t.Error("values lost")
		}
		if wctx.Err() != nil {
			t.Fatal("ended before its parent")
		}
		cancel()
		<-wctx.Done() // at once: the test would time out otherwise
	})
	t.Run("deadline", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		wctx, done := waitCtx(ctx)
		defer done()
		<-ctx.Done()
		if _, ok := wctx.Deadline(); ok {
			t.Error("the statement's context has the caller's deadline")
		}
		<-wctx.Done() // deadlineGrace after the deadline
		if !errors.Is(wctx.Err(), context.Canceled) {
			t.Fatalf("statement context: %v", wctx.Err())
		}
	})
	t.Run("done", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		wctx, done := waitCtx(ctx)
		done()
		if wctx.Err() == nil {
			t.Fatal("done did not end the statement's context")
		}
	})
}

// txContext keeps ctx's values but not its cancellation: fn's transaction
// outlives a cancelled caller until the caller ends it; bound arms the
// cancellation around BEGIN, the lock and COMMIT only.
func TestTxContextAndBound(t *testing.T) {
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
	txCtx, txCancel := txContext(ctx)
	defer txCancel()
	stop := bound(ctx, txCancel)
	if !stop() {
		t.Fatal("stop before the end of ctx reported it ended")
	}
	cancel()
	if txCtx.Err() != nil {
		t.Fatal("the transaction's context ended with the caller's while unbound")
	}
	if txCtx.Value(ctxKey{}) != "v" {
		t.Error("values lost")
	}

	ctx2, cancel2 := context.WithCancel(context.Background())
	txCtx2, txCancel2 := txContext(ctx2)
	stop2 := bound(ctx2, txCancel2)
	cancel2()
	<-txCtx2.Done() // bound cancels it
	if stop2() {
		t.Error("stop after the end of ctx reported it had not ended")
	}
}

// withinGrace lets COMMIT or ROLLBACK run when ctx ends while it runs, and
// cuts it (cancels the transaction's context) endGrace later.
func TestWithinGrace(t *testing.T) {
	t.Parallel()
	t.Run("ends before ctx", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		want := errors.New("commit failed")
		err := withinGrace(ctx, func() { t.Error("cancelled") }, func() error { return want })
		if err != want {
			t.Fatalf("withinGrace: %v", err)
		}
	})
	t.Run("cut after ctx ended", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		txCtx, txCancel := context.WithCancel(context.Background())
		defer txCancel()
		started := make(chan struct{})
		go func() {
			<-started
			cancel()
		}()
		err := withinGrace(ctx, txCancel, func() error {
			close(started)
			<-txCtx.Done() // a server that stopped answering: only the cut ends it
			return txCtx.Err()
		})
		if !errors.Is(err, context.Canceled) || ctx.Err() == nil {
			t.Fatalf("withinGrace: %v (ctx %v)", err, ctx.Err())
		}
	})
}

// releaseCtx: the caller's values, never its cancellation, bounded by
// releaseTimeout; releaseWithin cuts a release endGrace after ctx ended.
func TestReleaseCtx(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
	cancel()
	for name, f := range map[string]func(context.Context) (context.Context, context.CancelFunc){"releaseCtx": releaseCtx, "txReleaseCtx": txReleaseCtx} {
		rctx, rcancel := f(ctx)
		if rctx.Err() != nil || rctx.Value(ctxKey{}) != "v" {
			t.Errorf("%s: %v, value %v", name, rctx.Err(), rctx.Value(ctxKey{}))
		}
		if dl, ok := rctx.Deadline(); !ok || time.Until(dl) > releaseTimeout {
			t.Errorf("%s: deadline %v %v, want within releaseTimeout", name, dl, ok)
		}
		rcancel()
	}
	// a release on a server that stopped answering, its caller's
	// context ended: cut endGrace later
	err := releaseWithin(ctx, func(rctx context.Context) error {
		<-rctx.Done()
		return rctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("releaseWithin: %v, want the release cut", err)
	}
}

// A statement on a shared lock connection is bounded by two keepalive
// intervals, never under 2 s.
func TestSharedTryTimeout(t *testing.T) {
	for keepalive, want := range map[time.Duration]time.Duration{
		0:                       2 * time.Second,
		100 * time.Millisecond:  2 * time.Second,
		time.Second:             2 * time.Second,
		1500 * time.Millisecond: 3 * time.Second,
		time.Minute:             2 * time.Minute,
	} {
		if got := sharedTryTimeout(keepalive); got != want {
			t.Errorf("sharedTryTimeout(%v) = %v, want %v", keepalive, got, want)
		}
	}
}
