package entlock

import (
	"context"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
)

// Holder asks the database who holds the lock named by key: the answer to
// "why didn't my job run?" when [Transaction], [Session] or [RunOnce]
// returned [ormlock.ErrNotAcquired] (a RunOnce lock is named
// [ormlock.RunKey](job, slot)). x is the client or the *Driver, as for
// [Session]. The key is resolved exactly as the verbs resolve it, with the
// namespace given to [Wrap] or per call ([ormlock.WithNamespace]); other
// options are ignored.
//
// A free lock is reported as HolderInfo.Held false with a nil error. A held
// one names the holder's connection: on PostgreSQL its backend pid, user,
// application_name, client address, state, last query and transaction start
// (pg_locks joined with pg_stat_activity); on MySQL/MariaDB its connection
// id, user, host, command, state and statement (IS_USED_LOCK joined with
// information_schema.PROCESSLIST). See [ormlock.HolderInfo] for each field
// and for what needs privileges.
//
// The lookup runs on a connection of the pool, outside any transaction (a
// transactional client, tx.Client(), is refused). It is a snapshot: the
// holder may be gone by the time it returns.
func Holder[T TxLike, K ormlock.KeyType](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, key K, opts ...ormlock.Option) (ormlock.HolderInfo, error) {
	const verb = "Holder"
	if err := checkCall(ctx, verb, x, opts); err != nil {
		return ormlock.HolderInfo{}, err
	}
	k := keys.Of(key)
	if err := k.Validate(); err != nil {
		return ormlock.HolderInfo{}, err
	}
	d, cfg, err := driverFor(ctx, verb, x, opts)
	if err != nil {
		return ormlock.HolderInfo{}, err
	}
	op, err := lockproto.NewOp(d.dial, verb, k, cfg)
	if err != nil {
		return ormlock.HolderInfo{}, err
	}
	if err := op.CheckServer(ctx, d.db); err != nil {
		return ormlock.HolderInfo{}, err
	}
	return lockproto.LookupHolder(ctx, d.db, op)
}
