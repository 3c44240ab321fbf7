package entlock

import (
	"context"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/verbs"
)

// Session holds the lock named by key on a dedicated connection for as long
// as fn runs; fn works through the normal client with the ctx it is given.
// x is the client built on a [Driver], or the *Driver (an unwrapped client
// gives [ErrNotWrapped]). A keepalive ([ormlock.WithKeepalive], default 2s)
// cancels fn's ctx with cause [ormlock.ErrLockLost] when the lock is lost,
// and Session's error then wraps ErrLockLost. See docs/PROTOCOL.md
// (Session).
func Session[T TxLike, K ormlock.KeyType](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, key K, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
	return verbs.Session(ctx, binder[T]{x}, pkg, keys.Of[ormlock.Key](key), fn, opts)
}

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
	return verbs.Lead(ctx, binder[T]{x}, pkg, keys.Of[ormlock.Key](key), fn, opts)
}

// RunScheduled is [RunOnce] for the slot of the current time under
// schedule: RunOnce(ctx, client, job, schedule.Slot(time.Now()), fn,
// opts...), the form that cannot get the slot wrong (see
// gormlock.RunScheduled). With [ormlock.WithCatchUp] it first runs the
// missed slots of the window; fn reads the slot it runs with [Slot](tx). A
// nil schedule is an error wrapping [ormlock.ErrInvalidArgument]. See
// docs/SCHEDULES.md (Catch-up of missed slots).
func RunScheduled[T TxLike](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, job string, schedule ormlock.Schedule, fn func(tx T) error, opts ...ormlock.Option) error {
	return verbs.RunScheduled(ctx, binder[T]{x}, pkg, job, schedule, fn == nil, opts, func(slot time.Time) error { return RunOnce(ctx, x, job, slot, fn, opts...) })
}

// Migrate creates the [RunOnce] ledger table, and the fence table of
// [ormlock.WithFencing], if they do not exist: the same tables as every
// other adapter's Migrate, so they can all share them. Calling it again
// is harmless, and replicas may all call it at start-up. x is the client or the
// *Driver, as for [Session]; the table is "ormlock_runs" or
// [ormlock.WithLedgerTable]'s, and a name that is not a plain identifier is
// an error wrapping [ormlock.ErrInvalidArgument]. The tables are not part of
// ent's schema. See docs/PROTOCOL.md (The ledger).
func Migrate[T TxLike](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, opts ...ormlock.Option) error {
	return verbs.Migrate(ctx, binder[T]{x}, pkg, opts)
}

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
	h, err := verbs.Holder(ctx, binder[T]{x}, pkg, keys.Of[ormlock.Key](key), opts)
	return ormlock.HolderInfo(h), err
}

// Runs returns the last limit runs of job from the ledger table, newest slot
// first: who ran which slot, when, for how long, and with which error, in the
// namespace in effect ([ormlock.WithNamespace], per call or given to [Wrap]).
// x is the client or the *Driver, as for [Session]; a transactional client
// (tx.Client()) is refused. limit must be positive. See docs/PROTOCOL.md (The
// ledger).
func Runs[T TxLike](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, job string, limit int, opts ...ormlock.Option) ([]ormlock.Run, error) {
	return ledger.RunsAs[ormlock.Run](verbs.Runs(ctx, binder[T]{x}, pkg, job, limit, opts))
}

// Prune deletes the ledger rows of finished runs ('done' or 'failed') whose
// slot is more than olderThan before now by the database server's clock,
// and returns how many it deleted: gormlock.Prune's twin (never a 'running'
// claim, short batches, only the namespace in effect, olderThan longer than
// the longest period of the jobs, and at least the catch-up window of
// [ormlock.WithCatchUp] given with it plus 1 minute). x is the client or
// the *Driver, as for [Session]; it works through the pool, outside any
// transaction. See docs/PROTOCOL.md (The ledger).
func Prune[T TxLike](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, olderThan time.Duration, opts ...ormlock.Option) (int64, error) {
	return verbs.Prune(ctx, binder[T]{x}, pkg, olderThan, opts)
}

// AdvanceFences adds by to every fencing counter of the namespace in
// effect and returns how many it moved: gormlock.AdvanceFences' twin, the
// remedy after promoting an asynchronous replica. x is the client or the
// *Driver, as for [Session]; it works through the pool, outside any
// transaction. See docs/PROTOCOL.md (Failover).
func AdvanceFences[T TxLike](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, by int64, opts ...ormlock.Option) (int64, error) {
	return verbs.AdvanceFences(ctx, binder[T]{x}, pkg, by, opts)
}
