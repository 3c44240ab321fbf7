package testdb

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ormlock/ormlock"
)

// Recorder is an ormlock.Observer for tests that keeps every event; it is
// safe for concurrent use (the Session keepalive reports from its own
// goroutine).
type Recorder struct {
	mu     sync.Mutex
	events []ormlock.Event
}

// Observe implements ormlock.Observer.
func (r *Recorder) Observe(_ context.Context, e ormlock.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// Events returns a copy of the events recorded so far.
func (r *Recorder) Events() []ormlock.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ormlock.Event(nil), r.events...)
}

// Kinds returns the kinds of the events recorded so far.
func (r *Recorder) Kinds() []ormlock.EventKind {
	es := r.Events()
	ks := make([]ormlock.EventKind, len(es))
	for i, e := range es {
		ks[i] = e.Kind
	}
	return ks
}

// Count returns how many events of kind were recorded.
func (r *Recorder) Count(kind ormlock.EventKind) int {
	n := 0
	for _, e := range r.Events() {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// Reset forgets the events recorded so far.
func (r *Recorder) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = nil
}

// Take returns the kinds recorded so far, comma-separated (e.g.
// "attempt,acquired,released"), and forgets them.
func (r *Recorder) Take() string {
	ks := r.Kinds()
	r.Reset()
	names := make([]string, len(ks))
	for i, k := range ks {
		names[i] = k.String()
	}
	return strings.Join(names, ",")
}

// Holders counts the callers inside a critical section and remembers the
// most seen at once: the in-process check of mutual exclusion. The zero
// value is ready; it is safe for concurrent use.
type Holders struct{ inside, max atomic.Int64 }

// Enter records one more caller inside; call the result when it leaves.
func (h *Holders) Enter() (leave func()) {
	n := h.inside.Add(1)
	for {
		m := h.max.Load()
		if n <= m || h.max.CompareAndSwap(m, n) {
			break
		}
	}
	return func() { h.inside.Add(-1) }
}

// Max is the most callers seen inside at once.
func (h *Holders) Max() int64 { return h.max.Load() }
