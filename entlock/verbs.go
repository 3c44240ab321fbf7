package entlock

import (
	"context"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/verbs"
)

// Session is ormlock's Session (see [ormlock], The verbs) for ent: x is
// the client built on a [Driver], or the *Driver (an unwrapped client gives
// [ErrNotWrapped]); fn works through the normal client with the ctx it is
// given.
func Session[T TxLike, K ormlock.KeyType](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, key K, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
	return verbs.Session(ctx, binder[T]{x}, pkg, keys.Of[ormlock.Key](key), fn, opts)
}

// Lead is ormlock's Lead for ent: each term is a [Session] on x (the
// client or the *Driver); ctx ends the campaign. A leader asked to step
// down ([Act] with [ormlock.Resign]) sees fn's ctx cancelled with a cause
// wrapping [ormlock.ErrLockLost] within one keepalive (lease renewal)
// interval and stays out for the cooldown; [ormlock.WithoutCampaign]
// follows without campaigning (see gormlock.Lead).
func Lead[T TxLike, K ormlock.KeyType](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, key K, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
	return verbs.Lead(ctx, binder[T]{x}, pkg, keys.Of[ormlock.Key](key), fn, opts)
}

// RunScheduled is [RunOnce] for the slot of the current time under
// schedule, and with [ormlock.WithCatchUp] for the missed slots first; fn
// reads the slot it runs with [Slot](tx).
func RunScheduled[T TxLike](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, job string, schedule ormlock.Schedule, fn func(tx T) error, opts ...ormlock.Option) error {
	return verbs.RunScheduled(ctx, binder[T]{x}, pkg, job, schedule, fn == nil, opts, func(slot time.Time) error { return RunOnce(ctx, x, job, slot, fn, opts...) })
}

// Migrate is ormlock's Migrate for ent (x the client or the *Driver): the
// same ledger and fence tables as every other adapter's, not part of ent's
// schema; replicas may all call it at start-up.
func Migrate[T TxLike](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, opts ...ormlock.Option) error {
	return verbs.Migrate(ctx, binder[T]{x}, pkg, opts)
}

// Holder asks the database behind x (the client or the *Driver; a
// transactional client is refused) who holds the lock named by key,
// resolved as the verbs resolve it (the namespace of [Wrap] or the call).
func Holder[T TxLike, K ormlock.KeyType](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, key K, opts ...ormlock.Option) (ormlock.HolderInfo, error) {
	h, err := verbs.Holder(ctx, binder[T]{x}, pkg, keys.Of[ormlock.Key](key), opts)
	return ormlock.HolderInfo(h), err
}

// Holders returns every holder of key behind x, whatever its shape (see
// gormlock.Holders).
func Holders[T TxLike, K ormlock.KeyType](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, key K, opts ...ormlock.Option) ([]ormlock.HolderInfo, error) {
	return lockproto.HoldersAs[ormlock.HolderInfo](verbs.Holders(ctx, binder[T]{x}, pkg, keys.Of[ormlock.Key](key), opts))
}

// Runs returns the last limit runs of job from the ledger, newest slot
// first, in the namespace in effect (per call or given to [Wrap]), stale
// runs marked ([ormlock.Run] Stale); x is the client or the *Driver.
func Runs[T TxLike](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, job string, limit int, opts ...ormlock.Option) ([]ormlock.Run, error) {
	return ledger.RunsAs[ormlock.Run](verbs.Runs(ctx, binder[T]{x}, pkg, job, limit, opts))
}

// Prune is ormlock's Prune for ent (x the client or the *Driver), through
// the pool outside any transaction: finished and stale runs older than
// olderThan by the database server's clock, never a 'running' claim whose
// lock is held; an olderThan
// shorter than the catch-up window given with it plus 1 minute is refused.
func Prune[T TxLike](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, olderThan time.Duration, opts ...ormlock.Option) (int64, error) {
	return verbs.Prune(ctx, binder[T]{x}, pkg, olderThan, opts)
}

// AdvanceFences adds by to every fencing counter of the namespace in
// effect and returns how many it moved, the remedy after promoting an
// asynchronous replica; x is the client or the *Driver. See
// docs/PROTOCOL.md (Failover).
func AdvanceFences[T TxLike](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, by int64, opts ...ormlock.Option) (int64, error) {
	return verbs.AdvanceFences(ctx, binder[T]{x}, pkg, by, opts)
}

// Usage reads the tokens of the rate limit key ([ormlock.Rate]) in use
// behind x, the client or the *Driver (see gormlock.Usage).
func Usage[T TxLike](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, key ormlock.Key, opts ...ormlock.Option) (ormlock.RateUsage, error) {
	return verbs.Usage(ctx, binder[T]{x}, pkg, key, opts)
}
