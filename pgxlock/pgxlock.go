package pgxlock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/verbs"
)

// Transaction is ormlock's Transaction (see [ormlock], The verbs) on a
// connection of pool: BEGIN and the lock travel in one message, so a
// locked transaction costs the round trips of a plain one; fn's ctx
// carries the fencing token; fn may also end tx itself with tx.Commit or
// tx.Rollback, which release the lock at once.
func Transaction[K ormlock.KeyType](ctx context.Context, pool *pgxpool.Pool, key K, fn func(ctx context.Context, tx pgx.Tx) error, opts ...ormlock.Option) error {
	return verbs.Transaction(ctx, binder{pool}, pkg, keys.Of[ormlock.Key](key), fn, locked, fn == nil, opts)
}

// Session is ormlock's Session on a dedicated connection of pool; fn works
// through pool with the ctx it is given.
func Session[K ormlock.KeyType](ctx context.Context, pool *pgxpool.Pool, key K, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
	return verbs.Session(ctx, binder{pool}, pkg, keys.Of[ormlock.Key](key), fn, opts)
}

// Lead is ormlock's Lead on pool: each term is a [Session]; ctx ends the
// campaign. A leader asked to step down ([Act] with [ormlock.Resign])
// sees fn's ctx cancelled with a cause wrapping [ormlock.ErrLockLost]
// within one keepalive (lease renewal) interval and stays out for the
// cooldown; [ormlock.WithoutCampaign] follows without campaigning (see
// gormlock.Lead).
func Lead[K ormlock.KeyType](ctx context.Context, pool *pgxpool.Pool, key K, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
	return verbs.Lead(ctx, binder{pool}, pkg, keys.Of[ormlock.Key](key), fn, opts)
}

// RunOnce is ormlock's RunOnce on pool, on the same lock and ledger rows as
// gormlock.RunOnce and entlock.RunOnce: fn's tx is the locked transaction
// that also writes the ledger row; with [ormlock.WithClaim] it is a
// transaction of its own, begun on a ctx that ends with cause
// [ormlock.ErrLockLost] if the lock is lost (nil with
// schedhook.ClaimNoTx). A job name is valid UTF-8 without NUL bytes or a
// trailing space, at most 191 characters.
func RunOnce(ctx context.Context, pool *pgxpool.Pool, job string, slot time.Time, fn func(ctx context.Context, tx pgx.Tx) error, opts ...ormlock.Option) error {
	return verbs.RunOnce(ctx, binder{pool}, pkg, job, slot, fn, locked, claimed(pool, fn), fn == nil, opts)
}

// RunScheduled is [RunOnce] for the slot of schedule at the current time,
// and with [ormlock.WithCatchUp] for the missed slots first.
func RunScheduled(ctx context.Context, pool *pgxpool.Pool, job string, schedule ormlock.Schedule, fn func(ctx context.Context, tx pgx.Tx) error, opts ...ormlock.Option) error {
	return verbs.RunScheduled(ctx, binder{pool}, pkg, job, schedule, fn == nil, opts, func(slot time.Time) error { return RunOnce(ctx, pool, job, slot, fn, opts...) })
}

// Migrate is ormlock's Migrate on pool: it creates or upgrades the ledger
// and fence tables under a lock of its own, so every instance may call it
// at start-up.
func Migrate(ctx context.Context, pool *pgxpool.Pool, opts ...ormlock.Option) error {
	return verbs.Migrate(ctx, binder{pool}, pkg, opts)
}

// Holder asks the server behind pool who holds the lock named by key.
func Holder[K ormlock.KeyType](ctx context.Context, pool *pgxpool.Pool, key K, opts ...ormlock.Option) (ormlock.HolderInfo, error) {
	h, err := verbs.Holder(ctx, binder{pool}, pkg, keys.Of[ormlock.Key](key), opts)
	return ormlock.HolderInfo(h), err
}

// Holders returns every holder of key behind pool, whatever its shape
// (see gormlock.Holders).
func Holders[K ormlock.KeyType](ctx context.Context, pool *pgxpool.Pool, key K, opts ...ormlock.Option) ([]ormlock.HolderInfo, error) {
	return lockproto.HoldersAs[ormlock.HolderInfo](verbs.Holders(ctx, binder{pool}, pkg, keys.Of[ormlock.Key](key), opts))
}

// Runs returns the last limit runs of job from the ledger, newest slot
// first, in the namespace in effect, stale runs marked ([ormlock.Run]
// Stale).
func Runs(ctx context.Context, pool *pgxpool.Pool, job string, limit int, opts ...ormlock.Option) ([]ormlock.Run, error) {
	return ledger.RunsAs[ormlock.Run](verbs.Runs(ctx, binder{pool}, pkg, job, limit, opts))
}

// Prune is ormlock's Prune on pool: finished and stale runs (never a
// 'running' one whose lock is held) whose slot is older than olderThan by
// the database server's clock, batch by batch (an olderThan
// shorter than the catch-up window given with it plus 1 minute is
// refused).
// It also deletes the lease rows expired for longer than olderThan
// (docs/PROTOCOL.md, Leases).
func Prune(ctx context.Context, pool *pgxpool.Pool, olderThan time.Duration, opts ...ormlock.Option) (int64, error) {
	return verbs.Prune(ctx, binder{pool}, pkg, olderThan, opts)
}

// AdvanceFences adds by (1..2^52) to every fencing counter of the
// namespace in effect and returns how many it moved: after promoting an
// asynchronous replica, which may lack the last tokens the old primary
// issued. See docs/PROTOCOL.md (Failover).
func AdvanceFences(ctx context.Context, pool *pgxpool.Pool, by int64, opts ...ormlock.Option) (int64, error) {
	return verbs.AdvanceFences(ctx, binder{pool}, pkg, by, opts)
}

// locked hands fn the pgx.Tx over a locked transaction; fn may end it
// itself (errEnded then tells the verb that nothing is left to commit).
func locked(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error, lt *lockproto.LockedTx) error {
	t, err := txOf(lt)
	if err != nil {
		return err
	}
	err = fn(ctx, t)
	switch {
	case err != nil:
		return err
	case t.root.ended && t.root.endErr != nil:
		return t.root.endErr
	case t.root.ended:
		return errEnded
	}
	return nil
}

// mend is the last step of every verb (verbs.Pool.Mend): fn's own end of
// the transaction is a success, and a server that answered in another
// protocol is named.
func mend(err error) error {
	if errors.Is(err, errEnded) {
		return nil
	}
	return notPostgres(err)
}

// claimed runs fn in a transaction of its own on pool (RunOnce's claim
// mode), with the isolation level and read-only mode of
// [ormlock.WithTxOptions] if given; with schedhook.ClaimNoTx fn gets a nil
// tx.
func claimed(pool *pgxpool.Pool, fn func(ctx context.Context, tx pgx.Tx) error) verbs.Claimed {
	return func(ctx context.Context, p verbs.Pool) error {
		if p.Cfg.ClaimNoTx {
			return fn(ctx, nil)
		}
		topts, err := pgxOptions(p.Cfg.TxOptions)
		if err != nil {
			return err
		}
		tx, err := pool.BeginTx(ctx, topts)
		if err != nil {
			return errs.Wrap(err, "pgxlock.RunOnce: begin fn's transaction")
		}
		return lockproto.RunTx(ctx, claimTx{ctx, tx}, "pgxlock.RunOnce", func() error { return fn(ctx, tx) })
	}
}

// claimTx ends claim mode's pgx.Tx for lockproto.RunTx: a transaction fn
// ended itself (pgx.ErrTxClosed) is no failure, and the rollback does not
// depend on ctx, which may have ended.
type claimTx struct {
	ctx context.Context
	tx  pgx.Tx
}

func (c claimTx) Commit() error   { return notClosed(c.tx.Commit(c.ctx)) }
func (c claimTx) Rollback() error { return notClosed(c.tx.Rollback(context.WithoutCancel(c.ctx))) }

// notClosed is err, or nil when it says the transaction had already ended.
func notClosed(err error) error {
	if errors.Is(err, pgx.ErrTxClosed) {
		return nil
	}
	return err
}

// pgxOptions converts database/sql's transaction options to pgx's.
func pgxOptions(opts *sql.TxOptions) (pgx.TxOptions, error) {
	var o pgx.TxOptions
	if opts == nil {
		return o, nil
	}
	switch opts.Isolation {
	case sql.LevelDefault:
	case sql.LevelReadUncommitted:
		o.IsoLevel = pgx.ReadUncommitted
	case sql.LevelReadCommitted:
		o.IsoLevel = pgx.ReadCommitted
	case sql.LevelRepeatableRead, sql.LevelSnapshot:
		o.IsoLevel = pgx.RepeatableRead
	case sql.LevelSerializable:
		o.IsoLevel = pgx.Serializable
	default:
		return o, fmt.Errorf("%w: pgxlock: isolation level %s is not PostgreSQL's", ormlock.ErrInvalidArgument, opts.Isolation)
	}
	if opts.ReadOnly {
		o.AccessMode = pgx.ReadOnly
	}
	return o, nil
}

// Usage reads the tokens of the rate limit key ([ormlock.Rate]) in use
// behind pool (see gormlock.Usage).
func Usage(ctx context.Context, pool *pgxpool.Pool, key ormlock.Key, opts ...ormlock.Option) (ormlock.RateUsage, error) {
	return verbs.Usage(ctx, binder{pool}, pkg, key, opts)
}
