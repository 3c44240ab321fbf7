// The events of a use of a lock and its hook (Start, End on every path out).

package lockproto

import (
	"context"
	"log/slog"
	"runtime/debug"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
)

// Emit sends an event to the observer, if any. A panic in the observer is
// contained here, the one place every event goes through: it never reaches
// the verb (whose lock and connection are then released as usual) nor the
// Session keepalive goroutine (where it would end the process). The first
// panic of an Op is reported once, as an error on slog.Default() (see
// ormlock.Observer); the observer still gets the Op's later events.
func (o *Op) Emit(ctx context.Context, kind config.EventKind, err error) {
	if kind == config.EventLockLost || kind == config.EventReleaseFailed {
		serverMayHaveChanged(o)
	}
	o.use.last.Store(uint32(kind))
	hookEvent(ctx, o, kind, err) // event.go
	obs := o.Cfg.Observer
	if obs == nil {
		return
	}
	e := newEvent(o, kind, err)
	defer func() {
		if p := recover(); p != nil {
			observerPanic(ctx, o, e, p)
		}
	}()
	obs.Observe(ctx, e)
}

// StartHook calls the hook's Start (ormlock.WithHook) as the lock use
// begins, with an attempt event, and returns the context it returned,
// under which the verb then runs (fn's context derives from it); ctx
// itself when no hook is set, or when Start panicked (contained as an
// observer's panic is).
func (o *Op) StartHook(ctx context.Context) context.Context {
	ctx = beginUse(ctx, o) // event.go
	h := o.Cfg.Hook
	if h == nil {
		return ctx
	}
	return hookContext(ctx, o, newEvent(o, config.EventAttempt, nil), h.Start)
}

// hookContext is call (a hook's Start or Term) with ctx and e: the context
// it returns, or ctx when it returned nil or panicked (contained as an
// observer's panic is).
func hookContext(ctx context.Context, o *Op, e config.Event, call func(context.Context, config.Event) context.Context) (hctx context.Context) {
	defer func() {
		if p := recover(); p != nil {
			observerPanic(ctx, o, e, p)
			hctx = ctx
		}
	}()
	if hctx = call(ctx, e); hctx == nil {
		hctx = ctx
	}
	return hctx
}

// Use runs body as the verb's use of o's lock, between the hook's Start
// and End: StartHook, body under the context it returned, then EndHook
// with body's error on every path out of body (see Ending). It returns
// body's error. Every verb's use goes through it, but entlock's
// Transaction, whose Start is called in its driver, and which calls
// Ending itself.
func (o *Op) Use(ctx context.Context, body func(ctx context.Context) error) error {
	ctx = o.StartHook(ctx)
	return Ending(func() error { return body(ctx) }, func(err error) { o.EndHook(ctx, err) })
}

// Ending runs body and returns its error, and calls end once on every
// path out of body: with that error when body returns; with a
// *errs.PanicError carrying the panic's value when body panics, the
// panic then going on with that very value; with a *errs.PanicError
// whose Goexit is set when body calls runtime.Goexit, which then goes on
// ending the goroutine. body's own deferred work (a rollback, a release)
// has run by then.
func Ending(body func() error, end func(err error)) (err error) {
	returned := false
	defer func() {
		if returned {
			end(err)
			return
		}
		p := recover() // nil: runtime.Goexit, which recover does not stop
		end(errs.Panicked(p))
		if p != nil {
			panic(p)
		}
	}()
	err = body()
	returned = true
	return err
}

// EndHook calls the hook's End as the verb returns err, with the last
// event of the use (released, not_acquired, release_failed, lock_lost,
// already_done) and err as its Err; ctx is what StartHook returned. It
// does nothing before StartHook or after its first call: End is called
// once per use.
func (o *Op) EndHook(ctx context.Context, err error) {
	if !o.use.started || o.use.ended.Swap(true) {
		return
	}
	h := o.Cfg.Hook
	if h == nil {
		return
	}
	e := newEvent(o, config.EventKind(o.use.last.Load()), err)
	defer func() {
		if p := recover(); p != nil {
			observerPanic(ctx, o, e, p)
		}
	}()
	h.End(ctx, e)
}

// ObserverPanicMessage is the message of the log record that reports an
// observer's panic.
const ObserverPanicMessage = "ormlock: observer panicked; the panic was contained and the lock handled as usual"

// observerPanic reports the first observer panic of o on slog.Default().
func observerPanic(ctx context.Context, o *Op, e config.Event, p any) {
	if o.use.panicked.Swap(true) {
		return
	}
	slog.Default().LogAttrs(context.WithoutCancel(ctx), slog.LevelError, ObserverPanicMessage,
		slog.String("event", e.Kind.String()),
		slog.String("verb", e.Verb),
		slog.String("key", e.Key.String()),
		slog.Any("panic", p),
		slog.String("stack", string(debug.Stack())),
	)
}
