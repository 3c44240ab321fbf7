package entlock

import (
	"context"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/keys"
)

// Lead campaigns for the lock named by key and runs fn while this caller
// leads: it waits for the lock as a [Session] does (on the server, asking
// again when a wait runs out, retrying after connection errors with a
// bounded backoff), then calls fn with a ctx that is cancelled with cause
// [ormlock.ErrLockLost] when leadership is lost. When fn returns by itself,
// the lock is released and Lead returns fn's error (nil: resigned); after a
// loss, Lead waits for fn to return and campaigns again. Lead returns
// ctx's cause when ctx ends. x is the client built on a [Driver], or the
// *Driver. With [ormlock.WithFencing] every term gets a greater token
// ([ormlock.FencingToken]); [ormlock.WithOwner] names this replica for
// [Holder]. An invalid key or option, an unsupported dialect or a refused
// login is returned at once. See docs/PROTOCOL.md (Lead).
func Lead[T TxLike, K ormlock.KeyType](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, key K, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
	op, d, err := sessionOp(ctx, "Lead", x, keys.Of[ormlock.Key](key), fn == nil, opts)
	if err != nil {
		return err
	}
	return op.Lead(ctx, d.db, fn)
}
