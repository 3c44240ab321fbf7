package main

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ormlock/ormlock"
)

// Metrics is an ormlock.Observer that exports lock events as Prometheus
// metrics. Copy it into your service; register it once and pass it to
// ormlock.WithObserver, per call or as the gormlock plugin's default:
//
//	m, err := NewMetrics(prometheus.DefaultRegisterer)
//	if err != nil {
//		return err
//	}
//	if err := db.Use(gormlock.New(ormlock.WithObserver(m))); err != nil {
//		return err
//	}
//
// Exported series (labels verb, dialect, lock):
//
//	ormlock_acquired_total               locks taken
//	ormlock_not_acquired_total{reason}   not taken: reason "held" (another holder had it),
//	                                     "timeout" / "canceled" (the context ended the wait),
//	                                     "error" (e.g. the database was unreachable)
//	ormlock_acquire_wait_seconds         time to take the lock (histogram)
//	ormlock_held_seconds                 how long the lock was held, observed at release (histogram)
//	ormlock_release_failures_total       releases that failed: the connection was destroyed
//	ormlock_lost_total                   Session locks lost while fn ran
//	ormlock_already_done_total           RunOnce calls that found their slot done
//
// Every label must take few values, or each new value makes new series
// (a histogram's a dozen buckets each) for as long as the process lives. verb,
// dialect and reason are bounded by ormlock itself: a handful of verbs, two
// dialects, four reasons. The lock label is bounded by what the application
// locks: it is the key ([ormlock.Key.String]), prefixed "namespace/" when a
// namespace is set, except for RunOnce, whose key has the slot in it (one
// key per run, without bound): its label is the job ([ormlock.Event.Job]),
// so one job is one series however many slots it runs. Keys made per entity
// (one lock per order id) would still make one series each: set LockLabel
// to map them to a few values.
type Metrics struct {
	// LockLabel returns the value of the lock label for an event. The
	// default is the namespace-qualified key, or job for RunOnce.
	LockLabel func(e ormlock.Event) string

	acquired      *prometheus.CounterVec
	notAcquired   *prometheus.CounterVec
	wait          *prometheus.HistogramVec
	held          *prometheus.HistogramVec
	releaseFailed *prometheus.CounterVec
	lost          *prometheus.CounterVec
	alreadyDone   *prometheus.CounterVec
}

var _ ormlock.Observer = (*Metrics)(nil)

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	labels := []string{"verb", "dialect", "lock"}
	counter := func(name, help string, extra ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ormlock", Name: name, Help: help}, append(labels, extra...))
	}
	// 1ms .. ~1h12m: from a hot-path lock to a nightly batch.
	buckets := prometheus.ExponentialBuckets(0.001, 4, 12)
	m := &Metrics{
		acquired:    counter("acquired_total", "Locks taken."),
		notAcquired: counter("not_acquired_total", "Locks not taken, by reason: held, timeout, canceled, error.", "reason"),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "ormlock", Name: "acquire_wait_seconds", Help: "Time taken to acquire a lock.", Buckets: buckets,
		}, labels),
		held: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "ormlock", Name: "held_seconds", Help: "How long a lock was held, observed at release.", Buckets: buckets,
		}, labels),
		releaseFailed: counter("release_failures_total", "Releases that failed; the lock's connection was destroyed."),
		lost:          counter("lost_total", "Session locks lost while the callback ran."),
		alreadyDone:   counter("already_done_total", "RunOnce calls whose slot was already done."),
	}
	for _, c := range []prometheus.Collector{m.acquired, m.notAcquired, m.wait, m.held, m.releaseFailed, m.lost, m.alreadyDone} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Observe implements ormlock.Observer. It only updates in-memory metrics, so
// it does not block the locking goroutine.
func (m *Metrics) Observe(_ context.Context, e ormlock.Event) {
	lock := m.lockLabel(e)
	switch e.Kind {
	case ormlock.EventAcquired:
		m.acquired.WithLabelValues(e.Verb, e.Dialect, lock).Inc()
		m.wait.WithLabelValues(e.Verb, e.Dialect, lock).Observe(e.Wait.Seconds())
	case ormlock.EventNotAcquired:
		m.notAcquired.WithLabelValues(e.Verb, e.Dialect, lock, reason(e.Err)).Inc()
	case ormlock.EventReleased:
		m.held.WithLabelValues(e.Verb, e.Dialect, lock).Observe(e.Held.Seconds())
	case ormlock.EventReleaseFailed:
		m.releaseFailed.WithLabelValues(e.Verb, e.Dialect, lock).Inc()
	case ormlock.EventLockLost:
		m.lost.WithLabelValues(e.Verb, e.Dialect, lock).Inc()
	case ormlock.EventAlreadyDone:
		m.alreadyDone.WithLabelValues(e.Verb, e.Dialect, lock).Inc()
	}
}

func (m *Metrics) lockLabel(e ormlock.Event) string {
	if m.LockLabel != nil {
		return m.LockLabel(e)
	}
	name := e.Key.String()
	if e.Job != "" { // RunOnce: the job, not its per-slot key
		name = e.Job
	}
	if e.Namespace != "" {
		return e.Namespace + "/" + name
	}
	return name
}

// reason classifies a not_acquired event.
func reason(err error) string {
	switch {
	case err == nil:
		return "held"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "error"
}
