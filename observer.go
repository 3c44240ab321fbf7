package ormlock

import (
	"context"
	"time"

	"github.com/ormlock/ormlock/internal/config"
)

// EventKind says what happened to a lock.
type EventKind uint8

// The events an [Observer] receives.
const (
	// EventAttempt: an acquisition is about to be tried.
	EventAttempt = EventKind(config.EventAttempt)
	// EventAcquired: the lock was taken; Event.Wait is the time it took.
	EventAcquired = EventKind(config.EventAcquired)
	// EventNotAcquired: another holder has the lock (or the wait ran out).
	EventNotAcquired = EventKind(config.EventNotAcquired)
	// EventReleased: the lock was released; Event.Held is the hold time.
	EventReleased = EventKind(config.EventReleased)
	// EventReleaseFailed: the release failed or reported the lock not held;
	// the connection was destroyed so the server frees the lock.
	EventReleaseFailed = EventKind(config.EventReleaseFailed)
	// EventLockLost: a Session's lock connection failed while fn ran.
	EventLockLost = EventKind(config.EventLockLost)
	// EventAlreadyDone: RunOnce found the slot already done.
	EventAlreadyDone = EventKind(config.EventAlreadyDone)
)

// String returns the event's snake_case name, e.g. "not_acquired".
func (k EventKind) String() string { return config.EventName(uint8(k)) }

// Event describes one thing that happened to a lock.
type Event struct {
	Kind EventKind
	// Verb is "Transaction", "Session", "RunOnce" or "Lead" (whose
	// acquired is elected and lock_lost deposed).
	Verb string
	// Dialect is "postgres" or "mysql".
	Dialect string
	// Key is the lock's key and Namespace its namespace. A RunOnce key has
	// the slot in it (see RunKey), so there is one per run.
	Key       Key
	Namespace string
	// Job is the RunOnce job name ("" for the other verbs): a label with a
	// value per job, not per run.
	Job string
	// Wait is how long acquisition took (EventAcquired, EventNotAcquired).
	Wait time.Duration
	// Held is how long the lock was held (EventReleased, EventReleaseFailed,
	// EventLockLost).
	Held time.Duration
	// Err is the error behind EventReleaseFailed and EventLockLost.
	Err error
}

// Observer receives lock events. Observe is called synchronously on the
// locking goroutine (or the keepalive goroutine for EventLockLost) and must
// not block. When no observer is set, no event is built at all.
//
// An observer cannot cost a lock, a connection or the process: a panic in
// Observe is recovered, the verb goes on (and releases) as if Observe had
// returned, and the first panic of each verb call is logged once, at
// slog.LevelError on slog.Default(), with the event kind, verb, key, panic
// value and stack. The observer still receives the call's later events.
// Observe must not call runtime.Goexit (testing's t.FailNow does), which
// cannot be recovered.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// observerOf is the [config.Observer] that [WithObserver] sets: it hands
// each event to an [Observer] as an [Event].
type observerOf struct{ o Observer }

func (a observerOf) Observe(ctx context.Context, e config.Event) {
	a.o.Observe(ctx, Event{
		Kind: EventKind(e.Kind), Verb: e.Verb, Dialect: e.Dialect, Key: Key(e.Key), Namespace: e.Namespace,
		Job: e.Job, Wait: e.Wait, Held: e.Held, Err: e.Err,
	})
}

// ObserverFunc adapts a function to [Observer].
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f(ctx, e).
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }
