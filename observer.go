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

func (a observerOf) Observe(ctx context.Context, e config.Event) { a.o.Observe(ctx, eventOf(e)) }

// eventOf is the [Event] of the protocol's plain event.
func eventOf(e config.Event) Event {
	return Event{
		Kind: EventKind(e.Kind), Verb: e.Verb, Dialect: e.Dialect, Key: Key(e.Key), Namespace: e.Namespace,
		Job: e.Job, Wait: e.Wait, Held: e.Held, Err: e.Err,
	}
}

// Hook is told when a verb's use of a lock starts and ends, and carries a
// context of its own through it: what a tracer needs (a span per verb call,
// parent of fn's work), which an [Observer], told of each event on the
// locking goroutine, cannot do.
//
// Start is called as Transaction, Session, Lead or RunOnce (RunScheduled:
// per run) starts its attempt, once its arguments and the server were
// checked, with an [EventAttempt] event; the verb then runs under the
// context Start returns: the lock's statements, and fn, whose context
// derives from it (GORM: tx.Statement.Context; ent's fn gets no context,
// so there only the lock's statements do). End is called once, as the verb
// returns, with that context and the use's last event: EventReleased (Held
// set), EventNotAcquired (Wait set), EventReleaseFailed or EventLockLost,
// whose Err is the error the verb returns (nil when it succeeded,
// ErrAlreadyDone for a RunOnce slot already done). A Lead is one use, over
// all its terms. A call refused before its attempt (an invalid argument, a
// refused server, an ended context) calls neither.
//
// A hook composes with an observer: both receive the events, each set by
// its own option, and a per-call option replaces the default of its own
// kind only (WithHook the plugin's or wrapper's hook, WithObserver its
// observer). A panic in Start or End is contained as an observer's is
// (Start's: the verb runs under ctx). The default is no hook, which costs
// nothing.
type Hook interface {
	Start(ctx context.Context, e Event) context.Context
	End(ctx context.Context, e Event)
}

// hookOf is the [config.Hook] that [WithHook] sets.
type hookOf struct{ h Hook }

func (a hookOf) Start(ctx context.Context, e config.Event) context.Context {
	return a.h.Start(ctx, eventOf(e))
}

func (a hookOf) End(ctx context.Context, e config.Event) { a.h.End(ctx, eventOf(e)) }

// ObserverFunc adapts a function to [Observer].
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f(ctx, e).
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }
