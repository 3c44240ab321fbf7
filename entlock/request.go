package entlock

import (
	"context"
	"errors"
	"sync/atomic"

	"entgo.io/ent/dialect"

	"github.com/ormlock/ormlock/internal/lockproto"
)

// The verbs cannot name the generated *ent.Tx or reach the driver inside a
// generated client, so they talk to the wrapper through the context of the
// client's Tx call: the verb puts a request in the context and calls
// client.Tx(ctx); ent passes the context to its driver's Tx, where the
// wrapper claims the request and answers it: a probe with the Driver alone,
// a verb's transaction with a lockedTx that the lock's transaction fills
// in once the lock is taken (call.Locked), claim mode's with a workTx. A
// request is claimed once, by the first wrapper that sees it, so a context
// that ent keeps (the generated Tx stores it for its hooks) never starts a
// second transaction.
type request struct {
	claimed atomic.Bool

	// set by the verb
	verb  string
	probe bool          // only find the driver (Session, Holder, ...)
	work  bool          // no lock: fn's own transaction in RunOnce's claim mode (see workTx)
	op    *lockproto.Op // the lock of a work request, whose options fn's transaction takes

	// set by the driver that claimed it
	drv *Driver
	tx  dialect.Tx // the transaction started for the request: a *lockedTx, or a *workTx
}

type requestKey struct{}

// errProbe is what a wrapper's Tx returns to a probe: it starts no
// transaction.
var errProbe = errors.New("ormlock: entlock: driver probe, no transaction started")

// with returns ctx carrying r.
func (r *request) with(ctx context.Context) context.Context {
	return context.WithValue(ctx, requestKey{}, r)
}

// claim returns the request in ctx unless there is none or it was already
// claimed.
func claim(ctx context.Context) *request {
	r, _ := ctx.Value(requestKey{}).(*request)
	if r == nil || !r.claimed.CompareAndSwap(false, true) {
		return nil
	}
	return r
}
