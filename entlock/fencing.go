package entlock

import (
	"reflect"
	"sync"
	"time"
)

// FencingToken returns the fencing token of the lock under which tx was
// handed to fn, when the verb ran with [ormlock.WithFencing]: the tx of
// [Transaction] and of [RunOnce] (both modes), while fn runs. tx must be the
// very value fn was given (ent's Tx keeps no context, so the token is
// recorded against it): another value (tx.Client(), a copy) is not found. A
// Session's fn reads it with [ormlock.FencingToken] on its ctx. See
// docs/PROTOCOL.md (Fencing, Fenced writes).
func FencingToken(tx any) (int64, bool) {
	if t, ok := tx.(*lockedTx); ok {
		return t.lt.Token()
	}
	if !comparable(tx) {
		return 0, false
	}
	v, ok := tokens.Load(tx)
	if !ok {
		return 0, false
	}
	return v.(int64), true
}

// tokens maps the tx values handed to fn to their token while fn runs.
var tokens sync.Map

func comparable(v any) bool {
	if v == nil {
		return false
	}
	return reflect.TypeOf(v).Comparable()
}

// recordToken records tok for tx while fn runs; the returned func forgets
// it. It does nothing when there is no token.
func recordToken(tx any, src interface{ Token() (int64, bool) }) (forget func()) {
	tok, ok := src.Token()
	if !ok || !comparable(tx) {
		return func() {}
	}
	tokens.Store(tx, tok)
	return func() { tokens.Delete(tx) }
}

// Slot returns the slot of the [RunOnce] or [RunScheduled] run under which
// tx was handed to fn, while fn runs: a run caught up by
// [ormlock.WithCatchUp] learns here which slot it runs. tx must be the very
// value fn was given, as for [FencingToken].
func Slot(tx any) (time.Time, bool) {
	if !comparable(tx) {
		return time.Time{}, false
	}
	v, ok := slots.Load(tx)
	if !ok {
		return time.Time{}, false
	}
	return v.(time.Time), true
}

// slots maps the tx values handed to a RunOnce fn to their slot while fn
// runs.
var slots sync.Map

// recordSlot records slot for tx while fn runs; the returned func forgets
// it.
func recordSlot(tx any, slot time.Time) (forget func()) {
	if !comparable(tx) {
		return func() {}
	}
	slots.Store(tx, slot)
	return func() { slots.Delete(tx) }
}
