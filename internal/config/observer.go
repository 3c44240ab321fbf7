package config

import (
	"context"
	"time"

	"github.com/ormlock/ormlock/internal/keys"
)

// EventKind says what happened to a lock (ormlock.EventKind, an alias of
// this type, documents it and its values).
type EventKind uint8

// The kinds of [Event] (ormlock.EventAttempt and the other constants name
// these, and document them).
const (
	EventAttempt EventKind = iota + 1
	EventAcquired
	EventNotAcquired
	EventReleased
	EventReleaseFailed
	EventLockLost
	EventAlreadyDone
	EventSemaphoreMismatch
)

var eventNames = [...]string{"", "attempt", "acquired", "not_acquired", "released", "release_failed", "lock_lost", "already_done", "semaphore_mismatch"}

// String returns the event's snake_case name, e.g. "not_acquired".
func (k EventKind) String() string {
	if int(k) < len(eventNames) {
		return eventNames[k]
	}
	return "unknown"
}

// Event is one lock event: ormlock.Event, an alias of this type, whose
// documentation shows each field and says what it means. The lock
// protocol builds it once per event and hands it to the observer and the
// hook as it is.
type Event struct {
	Kind      EventKind
	Verb      string
	Dialect   string
	Key       keys.Key
	Namespace string
	Job       string
	Wait      time.Duration
	Held      time.Duration
	Err       error

	ID     uint64
	Server string
	Slot   time.Time
	Token  int64
	Try    bool
	Term   int64

	Mechanism string
	LeaseTTL  time.Duration
}

// Observer receives lock events ([Config.Observer]): ormlock.Observer, an
// alias of this type, documents its contract.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// ObserverFunc adapts a function to [Observer] (ormlock.ObserverFunc).
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f(ctx, e).
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// Hook is told of a lock use's start and end ([Config.Hook]):
// ormlock.Hook, an alias of this type, documents its contract.
type Hook interface {
	Start(ctx context.Context, e Event) context.Context
	End(ctx context.Context, e Event)
}

// KeepaliveHook is a [Hook] that also supplies the context of a Session's
// or Lead's keepalive statements (ormlock.KeepaliveHook).
type KeepaliveHook interface {
	Hook
	KeepaliveContext(ctx context.Context) context.Context
}

// EventHook is a [Hook] that is also told of each event of a use between
// its Start and End (ormlock.EventHook).
type EventHook interface {
	Hook
	Event(ctx context.Context, e Event)
	Term(ctx context.Context, e Event) context.Context
}

// Lock is what a verb's fn context says of the lock it runs under
// (ormlock.Held): the lock protocol's use of the lock implements it.
type Lock interface {
	// HeldNow reports whether the lock is held at this moment.
	HeldNow() bool
}
