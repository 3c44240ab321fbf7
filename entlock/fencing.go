package entlock

import (
	"reflect"
	"sync"
)

// FencingToken returns the fencing token of the lock under which tx was
// handed to fn, when the verb ran with [ormlock.WithFencing]: the tx of
// [Transaction] and of [RunOnce] (both modes), while fn runs. tx is the
// value fn was given (the generated *ent.Tx, or a dialect.Tx when the verb
// was called on the *Driver). ent's generated Tx keeps no context that fn
// could read, so the verbs record the token against that very value for as
// long as fn runs; another value (tx.Client(), a copy) is not found. A
// Session's fn reads its token with [ormlock.FencingToken] on its ctx.
//
// Use it in a fenced write (see [ormlock.CheckFenced]):
//
//	tok, _ := entlock.FencingToken(tx)
//	res, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence < $2", b, tok, id)
//
// (ExecContext needs ent's sql/execquery feature; a plain *sql.DB statement
// works as well, since the token is committed already.)
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
