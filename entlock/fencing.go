package entlock

import (
	"context"
	"reflect"
	"sync"
	"time"

	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/sched"
)

// FencingToken returns the fencing token of the lock under which tx was
// handed to fn, when the verb ran with [ormlock.WithFencing]: the tx of
// [Transaction] and of [RunOnce] (both modes), while fn runs. tx must be the
// very value fn was given (ent's Tx keeps no context, so the token is
// recorded against it): another value (tx.Client(), a copy) is not found. A
// Session's fn reads it with [ormlock.FencingToken] on its ctx. See
// docs/PROTOCOL.md (Fencing, Fenced writes).
func FencingToken(tx any) (int64, bool) {
	if t, ok := tx.(*lockedTx); ok && t.lt != nil {
		return t.lt.Token()
	}
	return load[int64](&tokens, tx)
}

// tokens maps the tx values handed to fn to their token while fn runs.
var tokens sync.Map

func comparable(v any) bool {
	if v == nil {
		return false
	}
	return reflect.TypeOf(v).Comparable()
}

// load returns what m records for tx, if anything.
func load[V any](m *sync.Map, tx any) (V, bool) {
	var zero V
	if !comparable(tx) {
		return zero, false
	}
	v, ok := m.Load(tx)
	if !ok {
		return zero, false
	}
	return v.(V), true
}

// Slot returns the slot of the [RunOnce] or [RunScheduled] run under which
// tx was handed to fn, while fn runs: a run caught up by
// [ormlock.WithCatchUp] learns here which slot it runs. tx must be the very
// value fn was given, as for [FencingToken].
func Slot(tx any) (time.Time, bool) { return load[time.Time](&slots, tx) }

// slots maps the tx values handed to a RunOnce fn to their slot while fn
// runs.
var slots sync.Map

// record records, while fn runs, what fn's tx stands for: op's fencing
// token (FencingToken), the slot of a run's lock (op.Job set: Slot) and
// fn's context ctx (Context). The Ender it returns ends tx, then forgets
// them.
func record[T TxLike](ctx context.Context, tx T, op *lockproto.Op) lockproto.Ender {
	if !comparable(tx) {
		return tx
	}
	if tok, ok := op.Token(); ok {
		tokens.Store(tx, tok)
	}
	if slot, ok := sched.SlotFrom(ctx); ok && op.Job != "" {
		slots.Store(tx, slot)
	}
	contexts.Store(tx, ctx)
	return recorded[T]{tx}
}

// recorded ends tx, then forgets what record recorded for it.
type recorded[T TxLike] struct{ tx T }

func (r recorded[T]) Commit() error {
	defer forget(r.tx)
	return r.tx.Commit()
}

func (r recorded[T]) Rollback() error {
	defer forget(r.tx)
	return r.tx.Rollback()
}

func forget(tx any) {
	tokens.Delete(tx)
	slots.Delete(tx)
	contexts.Delete(tx)
}
