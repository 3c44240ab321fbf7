package config

import (
	"context"
	"time"

	"github.com/ormlock/ormlock/internal/keys"
)

// The kinds of [Event], the values of ormlock.EventKind's constants (see
// their documentation there).
const (
	EventAttempt uint8 = iota + 1
	EventAcquired
	EventNotAcquired
	EventReleased
	EventReleaseFailed
	EventLockLost
	EventAlreadyDone
	EventSemaphoreMismatch
)

var eventNames = [...]string{"", "attempt", "acquired", "not_acquired", "released", "release_failed", "lock_lost", "already_done", "semaphore_mismatch"}

// EventName returns the snake_case name of an event kind, e.g.
// "not_acquired" (ormlock.EventKind.String).
func EventName(kind uint8) string {
	if int(kind) < len(eventNames) {
		return eventNames[kind]
	}
	return "unknown"
}

// Event is one lock event as the lock protocol reports it, in plain values:
// the fields of ormlock.Event, which package ormlock builds from it for
// the user's observer (the root keeps its documented types, see its
// doc.go, so internal code hands it plain values).
type Event struct {
	Kind      uint8 // an Event* kind
	Verb      string
	Dialect   string
	Key       keys.Key
	Namespace string
	Job       string
	Wait      time.Duration
	Held      time.Duration
	Err       error

	ID     uint64    // the acquisition: one per lock use, on all its events
	Server string    // the server's product: "postgresql", "mysql", "mariadb", ... ("" before the server check)
	Slot   time.Time // RunOnce and RunScheduled: the run's slot
	Token  int64     // the fencing token, once issued (WithFencing)
	Try    bool      // the acquisition tries once (no WithWait)
	Term   int64     // Lead: the term, 1 for the first campaign attempt (0 for the other verbs)
}

// Hook is the hook of [Config.Hook]: Start at a lock use's attempt, whose
// returned context the rest of the use runs under, and End at its end.
// Package ormlock implements it for an ormlock.Hook (ormlock.WithHook).
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

// Observer receives the lock events of [Config.Observer]. Package ormlock
// implements it for an ormlock.Observer (ormlock.WithObserver).
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// Lock is what a verb's fn context says of the lock it runs under
// (ormlock.Held): the lock protocol's use of the lock implements it.
type Lock interface {
	// HeldNow reports whether the lock is held at this moment.
	HeldNow() bool
}
