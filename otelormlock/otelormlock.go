// Package otelormlock traces and meters ormlock's locks with
// OpenTelemetry. It is a module of its own, so that a program that does
// not use it links no OpenTelemetry package.
//
//	db.Use(gormlock.New(otelormlock.New()))               // GORM: every verb of db
//	sqllock.Session(ctx, db, "k", fn, otelormlock.New())  // per call
//
// sqllock and pgxlock keep no defaults: build the option once
// (otel := otelormlock.New()) and pass it to each call, or wrap the verbs
// you use in a function of your own that appends it; a per-call
// otelormlock option replaces the plugin's (ormlock.WithHook's rule), so
// nothing is counted twice.
//
// Spans. One span per verb call, "ormlock.<Verb>" (ormlock.Transaction,
// ormlock.Session, ormlock.RunOnce (one per run of RunScheduled, caught-up
// runs included), ormlock.Lead), a child of the caller's span, that ends
// before the verb returns. fn's context carries it (GORM's
// tx.Statement.Context, Session's ctx, sqllock's and pgxlock's fn ctx,
// entlock.Context(tx); Lead's ctx carries its term's span, below), so a query span made inside fn (otelsql,
// otelpgx, GORM's tracing plugin) is its child. The lock's own statements
// run under it too; a Session's or Lead's keepalive statements do not:
// they run on a context with no span (ormlock.KeepaliveHook), so a long
// Session does not hang a ping every few seconds under its caller's
// trace. The acquisition is the span event "ormlock.acquired" (attribute
// ormlock.wait.duration, in seconds) and the release "ormlock.released";
// a refusal "ormlock.not_acquired"; a loss "ormlock.lost" (its error
// recorded). A Lead's span covers its campaign: each election is an
// "ormlock.elected" event and each deposition "ormlock.deposed", with
// ormlock.term, and each term is a child span "ormlock.Lead.term" (from
// its election to its release or loss), which that term's fn's context
// carries: fn's first span is the term span's direct child.
//
// Attributes: db.system.name ("postgresql", "mysql", "mariadb", from what
// the server said it is at ormlock's server check), server.address and
// server.port (WithServer), ormlock.verb, ormlock.namespace, ormlock.job and
// ormlock.slot (RunOnce), ormlock.wait ("try" or "wait"),
// ormlock.fencing_token (WithFencing; a lease's epoch under WithLease),
// ormlock.mechanism ("advisory", "named" or "lease", as
// ormlock.HolderInfo.Mechanism names it), ormlock.lease.epoch (the lease's
// epoch, once granted) and ormlock.lease.ttl (its TTL in seconds, under
// WithLease), ormlock.term (Lead), ormlock.outcome
// ("acquired", "not_acquired", "already_done", "lost", "error") and, by
// WithKeyAttribute only, ormlock.key. The span's status is Error when the
// verb returns an error other than ErrNotAcquired and ErrAlreadyDone, and
// when fn panics or calls runtime.Goexit: the span then records the
// [*ormlock.PanicError] (its message has the panic's value, its
// exception.stacktrace the panicking goroutine's stack) and ends, after
// the rollback and the release, before the panic goes on to the caller
// (or the goroutine ends).
//
// Metrics, in seconds, with bounded labels (ormlock.verb, ormlock.namespace,
// ormlock.job, ormlock.wait, db.system.name; ormlock.key by opt-in; never
// the slot):
//
//   - ormlock.lock.attempts (counter): one per acquisition, by its final
//     ormlock.outcome;
//   - ormlock.lock.acquire.duration (histogram): the wait, acquired or not;
//   - ormlock.lock.hold.duration (histogram): how long the lock was held
//     (not recorded for sqllock.Lock and pgxlock.Lock, whose lock the
//     caller's COMMIT or ROLLBACK ends, out of sight);
//   - ormlock.lock.held and ormlock.lock.waiting (up-down counters): the
//     locks held and the callers waiting now, added and subtracted with the
//     same attributes (a Lock's counts until its call returns);
//   - a span event ormlock.semaphore_mismatch when a Semaphore's caller saw
//     a holder of a larger n (ormlock.EventSemaphoreMismatch);
//   - ormlock.lock.lost and ormlock.lock.release_failures (counters).
//
// The lock statements' own durations are left to otelsql or otelpgx
// (db.client.operation.duration), which time them already.
//
// A tracer or meter provider that panics costs no lock: ormlock contains a
// hook's panics (they are logged once per call), and the instruments are
// made in New, where a panicking meter provider leaves the metrics off.
package otelormlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/ormlock/ormlock"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/ormlock/ormlock/otelormlock"

// leaseMechanism is ormlock.Event.Mechanism of a lease.
const leaseMechanism = "lease"

// Option configures New.
type Option func(*settings)

type settings struct {
	tp      trace.TracerProvider
	mp      metric.MeterProvider
	key     bool
	address string
	port    int
}

// WithTracerProvider sets the tracer provider; the default is the global
// one (otel.GetTracerProvider) at New's call.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(s *settings) { s.tp = tp }
}

// WithMeterProvider sets the meter provider; the default is the global one
// (otel.GetMeterProvider) at New's call.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(s *settings) { s.mp = mp }
}

// WithKeyAttribute adds the lock's key as the attribute ormlock.key, on
// the spans and the metrics. It is off by default: a key can carry data
// (an account id), and on a metric it is a label with a value per key.
// RunOnce's keys have the slot in them; their metrics keep the job.
func WithKeyAttribute() Option {
	return func(s *settings) { s.key = true }
}

// WithServer sets server.address and server.port on the spans: the
// logical name the pool's DSN reaches (ormlock does not read DSNs). port
// 0 leaves server.port out.
func WithServer(address string, port int) Option {
	return func(s *settings) { s.address, s.port = address, port }
}

// Bucket boundaries, in seconds: lock waits run from under a millisecond
// (a free lock) to a WithWait's minutes; holds to a Session's hours.
var (
	AcquireBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
	HoldBuckets    = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 14400, 86400}
)

// New returns the ormlock option that traces and meters the lock uses it
// is given to: per call, or as an adapter's defaults
// (gormlock.New(otelormlock.New())).
func New(opts ...Option) ormlock.Option {
	s := settings{}
	for _, o := range opts {
		if o != nil {
			o(&s)
		}
	}
	if s.tp == nil {
		s.tp = otel.GetTracerProvider()
	}
	if s.mp == nil {
		s.mp = otel.GetMeterProvider()
	}
	h := &hook{key: s.key}
	h.tracer = tracerOf(s.tp)
	h.inst = instrumentsOf(s.mp)
	if s.address != "" {
		h.server = append(h.server, attribute.String("server.address", s.address))
		if s.port > 0 {
			h.server = append(h.server, attribute.Int("server.port", s.port))
		}
	}
	return ormlock.WithHook(h)
}

// tracerOf is tp's tracer, a no-op one when tp panics.
func tracerOf(tp trace.TracerProvider) (t trace.Tracer) {
	defer func() {
		if recover() != nil {
			t = tracenoop.NewTracerProvider().Tracer(ScopeName)
		}
	}()
	return tp.Tracer(ScopeName)
}

type instruments struct {
	attempts, lost, releaseFailures metric.Int64Counter
	acquire, hold                   metric.Float64Histogram
	held, waiting                   metric.Int64UpDownCounter
}

// instrumentsOf makes the instruments of mp: no-op ones when mp panics or
// fails.
func instrumentsOf(mp metric.MeterProvider) (in instruments) {
	defer func() {
		if recover() != nil {
			in = instrumentsOf(noop.NewMeterProvider())
		}
	}()
	m := mp.Meter(ScopeName)
	var err, e error
	in.attempts, e = m.Int64Counter("ormlock.lock.attempts", metric.WithUnit("{attempt}"), metric.WithDescription("Lock acquisitions, by final outcome."))
	err = errors.Join(err, e)
	in.lost, e = m.Int64Counter("ormlock.lock.lost", metric.WithUnit("{lock}"), metric.WithDescription("Locks lost while held (a Session's connection failed)."))
	err = errors.Join(err, e)
	in.releaseFailures, e = m.Int64Counter("ormlock.lock.release_failures", metric.WithUnit("{lock}"), metric.WithDescription("Releases that failed or found the lock not held."))
	err = errors.Join(err, e)
	in.acquire, e = m.Float64Histogram("ormlock.lock.acquire.duration", metric.WithUnit("s"), metric.WithDescription("Time to acquire a lock, acquired or not."), metric.WithExplicitBucketBoundaries(AcquireBuckets...))
	err = errors.Join(err, e)
	in.hold, e = m.Float64Histogram("ormlock.lock.hold.duration", metric.WithUnit("s"), metric.WithDescription("Time a lock was held."), metric.WithExplicitBucketBoundaries(HoldBuckets...))
	err = errors.Join(err, e)
	in.held, e = m.Int64UpDownCounter("ormlock.lock.held", metric.WithUnit("{lock}"), metric.WithDescription("Locks held now."))
	err = errors.Join(err, e)
	in.waiting, e = m.Int64UpDownCounter("ormlock.lock.waiting", metric.WithUnit("{caller}"), metric.WithDescription("Callers waiting for a lock now (a Lead campaigning)."))
	err = errors.Join(err, e)
	if err != nil {
		otel.Handle(err)
		if _, ok := mp.(noop.MeterProvider); !ok {
			return instrumentsOf(noop.NewMeterProvider())
		}
	}
	return in
}

// hook is the ormlock.Hook (EventHook, KeepaliveHook) that New installs.
type hook struct {
	tracer trace.Tracer
	inst   instruments
	key    bool
	server []attribute.KeyValue
}

var (
	_ ormlock.EventHook     = (*hook)(nil)
	_ ormlock.KeepaliveHook = (*hook)(nil)
)

type useKey struct{}

// use is one lock use's state, from Start to End.
type use struct {
	span    trace.Span
	start   time.Time
	metric  metric.MeasurementOption // the bounded labels
	mu      sync.Mutex
	waiting bool // counted in ormlock.lock.waiting
	held    bool // counted in ormlock.lock.held
	lost    bool
	timed   bool // the acquisition's wait is recorded
	ended   bool
	terms   map[int64]trace.Span // Lead: the open term spans, by term
}

func verbOf(v string) string {
	for i := len(v) - 1; i >= 0; i-- {
		if v[i] == '.' {
			return v[i+1:]
		}
	}
	return v
}

func waitOf(e ormlock.Event) string {
	if e.Try {
		return "try"
	}
	return "wait"
}

// Start opens the use's span and counts the caller as waiting.
func (h *hook) Start(ctx context.Context, e ormlock.Event) context.Context {
	verb := verbOf(e.Verb)
	labels := make([]attribute.KeyValue, 0, 8)
	labels = append(labels, attribute.String("ormlock.verb", verb), attribute.String("ormlock.wait", waitOf(e)))
	if e.Server != "" {
		labels = append(labels, attribute.String("db.system.name", e.Server))
	}
	if e.Namespace != "" {
		labels = append(labels, attribute.String("ormlock.namespace", e.Namespace))
	}
	if e.Job != "" {
		labels = append(labels, attribute.String("ormlock.job", e.Job))
	}
	if h.key {
		labels = append(labels, attribute.String("ormlock.key", e.Key.String()))
	}
	attrs := append(append(labels[:len(labels):len(labels)], h.server...), attribute.Int64("ormlock.acquisition", int64(e.ID)))
	if !e.Slot.IsZero() {
		attrs = append(attrs, attribute.String("ormlock.slot", e.Slot.UTC().Format(time.RFC3339Nano)))
	}
	if e.Mechanism != "" {
		attrs = append(attrs, attribute.String("ormlock.mechanism", e.Mechanism))
	}
	if e.LeaseTTL > 0 {
		attrs = append(attrs, attribute.Float64("ormlock.lease.ttl", e.LeaseTTL.Seconds()))
	}
	u := &use{start: time.Now(), metric: metric.WithAttributeSet(attribute.NewSet(labels...)), waiting: true}
	ctx, u.span = h.tracer.Start(ctx, "ormlock."+verb, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	h.inst.waiting.Add(ctx, 1, u.metric)
	return context.WithValue(ctx, useKey{}, u)
}

// useOf returns the use of ctx, locked, with the event's fencing token on
// its span; nil when ctx has none or the use has ended.
func useOf(ctx context.Context, e ormlock.Event) *use {
	u, _ := ctx.Value(useKey{}).(*use)
	if u == nil {
		return nil
	}
	u.mu.Lock()
	if u.ended {
		u.mu.Unlock()
		return nil
	}
	if e.Token > 0 {
		u.span.SetAttributes(attribute.Int64("ormlock.fencing_token", e.Token))
		if e.Mechanism == leaseMechanism {
			u.span.SetAttributes(attribute.Int64("ormlock.lease.epoch", e.Token))
		}
	}
	return u
}

// Event follows the acquisition, release and loss (and a Lead's terms).
func (h *hook) Event(ctx context.Context, e ormlock.Event) {
	u := useOf(ctx, e)
	if u == nil {
		return
	}
	defer u.mu.Unlock()
	term := []attribute.KeyValue(nil)
	if e.Term > 0 {
		term = []attribute.KeyValue{attribute.Int64("ormlock.term", e.Term)}
	}
	switch e.Kind {
	case ormlock.EventAcquired:
		h.settled(ctx, u, e.Wait)
		if !u.held {
			u.held = true
			h.inst.held.Add(ctx, 1, u.metric)
		}
		a := append(term, attribute.Float64("ormlock.wait.duration", e.Wait.Seconds()))
		name := "ormlock.acquired"
		if e.Term > 0 {
			name = "ormlock.elected"
			u.span.SetAttributes(term...)
		}
		u.span.AddEvent(name, trace.WithAttributes(a...))
	case ormlock.EventSemaphoreMismatch:
		u.span.AddEvent("ormlock.semaphore_mismatch")
	case ormlock.EventNotAcquired:
		if e.Term > 0 {
			return // the campaign goes on
		}
		h.settled(ctx, u, e.Wait)
		u.span.AddEvent("ormlock.not_acquired", trace.WithAttributes(attribute.Float64("ormlock.wait.duration", e.Wait.Seconds())))
	case ormlock.EventReleased, ormlock.EventReleaseFailed, ormlock.EventLockLost:
		if u.held {
			u.held = false
			h.inst.held.Add(ctx, -1, u.metric)
			h.inst.hold.Record(ctx, e.Held.Seconds(), u.metric)
		}
		if e.Term > 0 {
			u.endTerm(e.Term, "ormlock."+e.Kind.String(), e.Err)
		}
		switch e.Kind {
		case ormlock.EventReleased:
			u.span.AddEvent("ormlock.released", trace.WithAttributes(append(term, attribute.Float64("ormlock.held.duration", e.Held.Seconds()))...))
		case ormlock.EventReleaseFailed:
			h.inst.releaseFailures.Add(ctx, 1, u.metric)
			u.span.AddEvent("ormlock.release_failed", trace.WithAttributes(term...))
			if e.Err != nil {
				u.span.RecordError(e.Err)
			}
		case ormlock.EventLockLost:
			u.lost = true
			h.inst.lost.Add(ctx, 1, u.metric)
			name := "ormlock.lost"
			if e.Term > 0 {
				name = "ormlock.deposed"
				if !u.waiting { // campaigning again
					u.waiting = true
					h.inst.waiting.Add(ctx, 1, u.metric)
				}
			}
			u.span.AddEvent(name, trace.WithAttributes(term...))
			if e.Err != nil {
				u.span.RecordError(e.Err)
			}
		}
	}
}

// Term opens the span of a Lead term just elected, "ormlock.Lead.term", a
// child of the campaign's ormlock.Lead span, which fn's context carries;
// it ends with the term (its release or deposition).
func (h *hook) Term(ctx context.Context, e ormlock.Event) context.Context {
	u := useOf(ctx, e)
	if u == nil {
		return ctx
	}
	defer u.mu.Unlock()
	a := []attribute.KeyValue{attribute.Int64("ormlock.term", e.Term)}
	if e.Token > 0 {
		a = append(a, attribute.Int64("ormlock.fencing_token", e.Token))
	}
	ctx, span := h.tracer.Start(ctx, "ormlock.Lead.term", trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(a...))
	if u.terms == nil {
		u.terms = map[int64]trace.Span{}
	}
	u.terms[e.Term] = span
	return ctx
}

// endTerm ends the span of term, if open, with ev as its last event.
func (u *use) endTerm(term int64, ev string, err error) {
	span, ok := u.terms[term]
	if !ok {
		return
	}
	delete(u.terms, term)
	span.AddEvent(ev)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// settled ends u's wait, which took wait: its duration recorded once,
// the caller no longer counted as waiting.
func (h *hook) settled(ctx context.Context, u *use, wait time.Duration) {
	if !u.timed {
		u.timed = true
		h.inst.acquire.Record(ctx, wait.Seconds(), u.metric)
	}
	if u.waiting {
		u.waiting = false
		h.inst.waiting.Add(ctx, -1, u.metric)
	}
}

// End closes the use: its outcome, the gauges back, the span ended.
func (h *hook) End(ctx context.Context, e ormlock.Event) {
	u := useOf(ctx, e)
	if u == nil {
		return
	}
	defer u.mu.Unlock()
	u.ended = true
	for term := range u.terms {
		u.endTerm(term, "ormlock.end", nil)
	}
	if !u.timed && e.Kind == ormlock.EventNotAcquired {
		h.inst.acquire.Record(ctx, e.Wait.Seconds(), u.metric)
	}
	if u.waiting {
		h.inst.waiting.Add(ctx, -1, u.metric)
	}
	if u.held {
		h.inst.held.Add(ctx, -1, u.metric)
		// a lock that outlives its verb (sqllock.Lock, pgxlock.Lock: the
		// caller's COMMIT ends it, unseen) has no hold to record
		if e.Kind != ormlock.EventAcquired {
			h.inst.hold.Record(ctx, e.Held.Seconds(), u.metric)
		}
	}
	outcome := outcomeOf(e, u)
	h.inst.attempts.Add(ctx, 1, u.metric, metric.WithAttributes(attribute.String("ormlock.outcome", outcome)))
	u.span.SetAttributes(attribute.String("ormlock.outcome", outcome))
	if e.Term > 0 {
		u.span.SetAttributes(attribute.Int64("ormlock.term", e.Term))
	}
	if err := e.Err; err != nil && !errors.Is(err, ormlock.ErrNotAcquired) && !errors.Is(err, ormlock.ErrAlreadyDone) {
		var pe *ormlock.PanicError
		// End runs while the panic unwinds: the stack is still fn's
		u.span.RecordError(err, trace.WithStackTrace(errors.As(err, &pe)))
		u.span.SetStatus(codes.Error, err.Error())
	}
	u.span.End()
}

// outcomeOf is the use's final outcome.
func outcomeOf(e ormlock.Event, u *use) string {
	switch {
	case errors.Is(e.Err, ormlock.ErrAlreadyDone):
		return "already_done"
	case u.lost || errors.Is(e.Err, ormlock.ErrLockLost):
		return "lost"
	case errors.Is(e.Err, ormlock.ErrNotAcquired):
		return "not_acquired"
	case e.Kind == ormlock.EventReleaseFailed:
		return "error"
	case u.timed && !u.waiting || e.Kind == ormlock.EventReleased:
		return "acquired"
	case e.Err != nil:
		return "error"
	}
	return "acquired"
}

// KeepaliveContext is the context of a Session's keepalive: ctx's values
// without any span, so that its statements start no child of the caller's
// trace (a statement tracer makes them roots of their own, or skips them).
func (h *hook) KeepaliveContext(ctx context.Context) context.Context {
	return trace.ContextWithSpanContext(ctx, trace.SpanContext{})
}
