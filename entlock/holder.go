package entlock

import (
	"context"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
)

// Holder asks the database who holds the lock named by key: the answer to
// "why didn't my job run?" when a verb returned [ormlock.ErrNotAcquired] (a
// RunOnce lock is named [ormlock.RunKey](job, slot)). x is the client or the
// *Driver, as for [Session]; a transactional client is refused. The key is
// resolved as the verbs resolve it (the namespace of [Wrap] or the call). A
// free lock is HolderInfo.Held false with a nil error; the answer is a
// snapshot. See docs/PROTOCOL.md (Holder) and [ormlock.HolderInfo].
func Holder[T TxLike, K ormlock.KeyType](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, key K, opts ...ormlock.Option) (ormlock.HolderInfo, error) {
	const verb = "Holder"
	k := keys.Of[ormlock.Key](key)
	d, cfg, err := open(ctx, verb, x, opts, k.Validate())
	if err != nil {
		return ormlock.HolderInfo{}, err
	}
	op, err := lockproto.NewOp(d.dial, verb, k, cfg)
	if err != nil {
		return ormlock.HolderInfo{}, err
	}
	if err := lockproto.Ended(ctx); err != nil {
		return ormlock.HolderInfo{}, err
	}
	if err := op.CheckServer(ctx, d.db); err != nil {
		return ormlock.HolderInfo{}, err
	}
	h, err := lockproto.LookupHolder(ctx, d.db, op)
	return ormlock.HolderInfo(h), err
}
