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
)

var eventNames = [...]string{"", "attempt", "acquired", "not_acquired", "released", "release_failed", "lock_lost", "already_done"}

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
}

// Hook is the hook of [Config.Hook]: Start at a lock use's attempt, whose
// returned context the rest of the use runs under, and End at its end.
// Package ormlock implements it for an ormlock.Hook (ormlock.WithHook).
type Hook interface {
	Start(ctx context.Context, e Event) context.Context
	End(ctx context.Context, e Event)
}

// Observer receives the lock events of [Config.Observer]. Package ormlock
// implements it for an ormlock.Observer (ormlock.WithObserver).
type Observer interface {
	Observe(ctx context.Context, e Event)
}
