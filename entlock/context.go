package entlock

import (
	"context"
	"sync"

	"github.com/ormlock/ormlock"
)

// Context returns the context fn's work should use, while fn runs: ent's
// fn gets a transaction and no context, so this is how it reaches what a
// Session's ctx carries elsewhere: the hook's (a tracer's span, which the
// queries made with it nest under: otelormlock), the fencing token
// ([ormlock.FencingToken]), the slot ([ormlock.Slot]) and whether the lock
// is held ([ormlock.Held]). tx must be the very value fn was given, as for
// [FencingToken]; for any other value, and once fn has returned, it
// returns context.Background(), for which Held is false.
//
//	err := entlock.Transaction(ctx, client, "report", func(tx *ent.Tx) error {
//		return tx.Item.Create().SetName("x").Exec(entlock.Context(tx))
//	})
func Context(tx any) context.Context {
	if comparable(tx) {
		if v, ok := contexts.Load(tx); ok {
			return v.(context.Context)
		}
	}
	return context.Background()
}

// Held reports whether the lock of the verb that handed tx to fn is held
// now: [ormlock.Held] of [Context](tx).
func Held(tx any) bool { return ormlock.Held(Context(tx)) }

// contexts maps the tx values handed to fn to fn's context while fn runs.
var contexts sync.Map
