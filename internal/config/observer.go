package config

import (
	"context"
	"time"

	"github.com/ormlock/ormlock/internal/keys"
)

// Event is one lock event as the lock protocol reports it: the fields of
// ormlock.Event. ormlock.WithObserver's [Observer] hands it to the user's
// ormlock.Observer as an ormlock.Event.
type Event struct {
	Kind      uint8 // an ormlock.EventKind
	Verb      string
	Dialect   string
	Key       keys.Key
	Namespace string
	Job       string
	Wait      time.Duration
	Held      time.Duration
	Err       error
}

// Observer receives the lock events of [Config.Observer]. Package ormlock
// implements it for an ormlock.Observer (ormlock.WithObserver).
type Observer interface {
	Observe(ctx context.Context, e Event)
}
