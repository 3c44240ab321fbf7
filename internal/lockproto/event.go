package lockproto

import (
	"context"
	"database/sql"
	"sync/atomic"
	"time"
	"weak"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/sched"
)

// use is what the events of one lock use carry beyond the Op's own
// fields: its acquisition id, the server's product, the run's slot, the
// Lead term, whether the use has ended (ormlock.Held), its last event, and
// whether an observer panicked.
type use struct {
	id     atomic.Uint64 // the acquisition id, drawn at the first event (nextUseID)
	server string        // the server's product, read as the use starts (begin)
	slot   time.Time     // RunOnce: the run's slot, read as the use starts
	term   int64         // Lead: this term's number (0: not a term)
	terms  atomic.Int64  // Lead: the terms campaigned so far (the campaign's events report the last)
	ended  atomic.Bool   // EndHook ran: the use is over
	// started: StartHook ran (or the campaign's, for a term), so that
	// events go to an EventHook only between its Start and End
	started bool
	// last is the kind of the last event emitted, which the hook's End
	// reports.
	last atomic.Uint32
	// panicked is set by the first observer panic the use contained, so
	// that it is reported once.
	panicked atomic.Bool
}

// useIDs draws the acquisition ids: unique in the process.
var useIDs atomic.Uint64

// useID returns o's acquisition id, drawing it on first use.
func useID(o *Op) uint64 {
	if id := o.use.id.Load(); id != 0 {
		return id
	}
	id := useIDs.Add(1)
	if !o.use.id.CompareAndSwap(0, id) {
		return o.use.id.Load()
	}
	return id
}

// serverProduct is the product of the pool o checked (its cached server
// facts), or "" before any check.
func serverProduct(o *Op) string {
	if o.use.server != "" {
		return o.use.server
	}
	o.checkedMu.Lock()
	wp := o.checkedPool
	o.checkedMu.Unlock()
	if wp == (weak.Pointer[sql.DB]{}) {
		return ""
	}
	if f, ok := genuine.Load(wp); ok {
		return f.(*serverFacts).product
	}
	return ""
}

// newEvent builds the event of kind for o.
func newEvent(o *Op, kind config.EventKind, err error) config.Event {
	e := config.Event{
		Kind: kind, Verb: o.Verb, Dialect: o.Dialect.String(), Key: o.Key, Namespace: o.Cfg.Namespace, Job: o.Job, Err: err,
		ID: useID(o), Server: serverProduct(o), Slot: o.use.slot, Token: o.fence.token, Try: o.Cfg.Wait <= 0, Term: max(o.use.term, o.use.terms.Load()),
	}
	e.Mechanism, e.LeaseTTL = mechanismLabel(o.target.mech), o.Cfg.Lease
	switch kind {
	case config.EventAcquired, config.EventNotAcquired:
		e.Wait = time.Since(o.start)
	case config.EventReleased, config.EventReleaseFailed, config.EventLockLost:
		e.Held = time.Since(o.acquired)
	}
	return e
}

// beginUse starts o's use as StartHook is called: it records the server's
// product and the run's slot (ctx's) for the events, and returns ctx
// carrying o as the lock fn runs under (ormlock.Held).
func beginUse(ctx context.Context, o *Op) context.Context {
	o.use.server = serverProduct(o)
	o.use.started = true
	if o.Job != "" { // RunOnce: its ctx carries the slot
		if slot, ok := sched.SlotFrom(ctx); ok {
			o.use.slot = slot
		}
	}
	return config.WithLock(ctx, o)
}

// HeldNow reports whether o's lock is held: its last event is
// acquired and its use has not ended (config.Lock).
func (o *Op) HeldNow() bool {
	return !o.use.ended.Load() && o.use.last.Load() == uint32(config.EventAcquired)
}

// TermContext returns fn's context fctx of a Lead term o carrying o as its
// lock (ormlock.Held: a term's lock, not the campaign's) and, for an
// EventHook, what its Term returned (a tracer's span per term); a panic
// there is contained, fctx then used.
func (o *Op) TermContext(fctx context.Context) context.Context {
	fctx = config.WithLock(fctx, o)
	h, ok := o.Cfg.Hook.(config.EventHook)
	if !ok || !o.use.started {
		return fctx
	}
	return hookContext(fctx, o, newEvent(o, config.EventAcquired, nil), h.Term)
}

// newTerm gives the Lead term t of campaign o its number and the
// campaign's acquisition id and server: a Lead is one use over its terms.
func newTerm(o, t *Op) {
	t.use.id.Store(useID(o))
	t.use.server = o.use.server
	t.use.started = o.use.started
	t.use.term = o.use.terms.Add(1)
}

// keepaliveContext returns the context a Session's keepalive statements
// run on: the hook's, when it supplies one (config.KeepaliveHook; a panic
// there is contained, the default then used), else ctx's values without
// its cancellation (context.WithoutCancel). It is never cancelled by ctx:
// the keepalive stops with fn.
func keepaliveContext(ctx context.Context, o *Op) (kctx context.Context) {
	kctx = context.WithoutCancel(ctx)
	h, ok := o.Cfg.Hook.(config.KeepaliveHook)
	if !ok {
		return kctx
	}
	defer func() {
		if p := recover(); p != nil {
			observerPanic(ctx, o, newEvent(o, config.EventAttempt, nil), p)
			kctx = context.WithoutCancel(ctx)
		}
	}()
	if k := h.KeepaliveContext(kctx); k != nil {
		return context.WithoutCancel(k)
	}
	return kctx
}

// hookEvent hands the event of kind to the hook when it takes events
// (config.EventHook), between its Start and End; a panic there is
// contained as an observer's is.
func hookEvent(ctx context.Context, o *Op, kind config.EventKind, err error) {
	h, ok := o.Cfg.Hook.(config.EventHook)
	if !ok || !o.use.started || o.use.ended.Load() {
		return
	}
	e := newEvent(o, kind, err)
	defer func() {
		if p := recover(); p != nil {
			observerPanic(ctx, o, e, p)
		}
	}()
	h.Event(ctx, e)
}
