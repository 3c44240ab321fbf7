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

// Transaction runs fn in a transaction on a connection of pool while the
// lock named by key is held, and returns fn's error unchanged; key is a
// name, an id or an [ormlock.Key]. BEGIN and the lock travel in one
// message, so a locked transaction costs the round trips of a plain one.
// fn's ctx carries the fencing token ([ormlock.FencingToken], with
// [ormlock.WithFencing]). The transaction commits when fn returns nil and
// rolls back otherwise (a panic included); fn may also end it itself with
// tx.Commit or tx.Rollback, which release the lock at once. It tries once
// ([ormlock.ErrNotAcquired] when the lock is held, fn not called) unless
// [ormlock.WithWait] is given. Protocol, isolation levels and cancellation:
// docs/PROTOCOL.md.
func Transaction[K ormlock.KeyType](ctx context.Context, pool *pgxpool.Pool, key K, fn func(ctx context.Context, tx pgx.Tx) error, opts ...ormlock.Option) error {
	return verbs.Transaction(ctx, binder{pool}, pkg, keys.Of[ormlock.Key](key), locked(fn), fn == nil, opts)
}

// Session holds the lock named by key on a dedicated connection of pool for
// as long as fn runs; fn works through the pool with the ctx it is given,
// not inside one long transaction. A keepalive ([ormlock.WithKeepalive],
// default 2s) cancels fn's ctx with cause [ormlock.ErrLockLost] when the
// lock is lost, and Session's error then wraps ErrLockLost. See
// docs/PROTOCOL.md (Session).
func Session[K ormlock.KeyType](ctx context.Context, pool *pgxpool.Pool, key K, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
	return verbs.Session(ctx, binder{pool}, pkg, keys.Of[ormlock.Key](key), fn, opts)
}

// Lead campaigns for the lock named by key and runs fn while this caller
// leads: it waits for the lock as [Session] does (on the server, asking
// again when a wait runs out, retrying after connection errors with a
// bounded backoff), then calls fn with a ctx that is cancelled with cause
// [ormlock.ErrLockLost] when leadership is lost. When fn returns by itself,
// the lock is released and Lead returns fn's error (nil: resigned); after a
// loss, Lead waits for fn to return and campaigns again. Lead returns the
// context's cause when ctx ends. With [ormlock.WithFencing] every term gets
// a greater token ([ormlock.FencingToken]); [ormlock.WithOwner] names this
// replica for [Holder]. An invalid key or option or a refused login is
// returned at once. See docs/PROTOCOL.md (Lead).
func Lead[K ormlock.KeyType](ctx context.Context, pool *pgxpool.Pool, key K, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
	return verbs.Lead(ctx, binder{pool}, pkg, keys.Of[ormlock.Key](key), fn, opts)
}

// RunOnce runs fn at most once per (job, slot) across every instance that
// shares the database, and records the run in the ledger table
// ([Migrate]): the same lock and rows as the other adapters' RunOnce. slot
// is the scheduled time, never time.Now(). A slot already done returns
// [ormlock.ErrAlreadyDone]. fn's tx is the locked transaction that also
// writes the ledger row; with [ormlock.WithClaim] it is a transaction of
// its own on the pool, begun on a ctx that ends with cause
// [ormlock.ErrLockLost] if the lock is lost. A job name is valid UTF-8 without NUL bytes or a trailing space, at most
// 191 characters; bad input wraps [ormlock.ErrInvalidArgument].
// See docs/PROTOCOL.md (RunOnce).
func RunOnce(ctx context.Context, pool *pgxpool.Pool, job string, slot time.Time, fn func(ctx context.Context, tx pgx.Tx) error, opts ...ormlock.Option) error {
	return verbs.RunOnce(ctx, binder{pool}, pkg, job, slot, locked(fn), claimed(pool, fn), fn == nil, opts)
}

// RunScheduled is [RunOnce] for the slot of schedule at the current time.
func RunScheduled(ctx context.Context, pool *pgxpool.Pool, job string, schedule ormlock.Schedule, fn func(ctx context.Context, tx pgx.Tx) error, opts ...ormlock.Option) error {
	return verbs.RunScheduled(ctx, binder{pool}, pkg, job, schedule, fn == nil, opts, func(slot time.Time) error { return RunOnce(ctx, pool, job, slot, fn, opts...) })
}

// Migrate creates the ledger table (and the fencing table) of RunOnce and
// [ormlock.WithFencing], or upgrades them, under a lock of its own, so that
// every instance may call it at start-up. See docs/PROTOCOL.md (The ledger).
func Migrate(ctx context.Context, pool *pgxpool.Pool, opts ...ormlock.Option) error {
	return verbs.Migrate(ctx, binder{pool}, pkg, opts)
}

// Holder asks the server who holds the lock named by key.
func Holder[K ormlock.KeyType](ctx context.Context, pool *pgxpool.Pool, key K, opts ...ormlock.Option) (ormlock.HolderInfo, error) {
	h, err := verbs.Holder(ctx, binder{pool}, pkg, keys.Of[ormlock.Key](key), opts)
	return ormlock.HolderInfo(h), err
}

// Runs returns the last limit runs of job from the ledger table, newest
// slot first, in the namespace in effect ([ormlock.WithNamespace]).
func Runs(ctx context.Context, pool *pgxpool.Pool, job string, limit int, opts ...ormlock.Option) ([]ormlock.Run, error) {
	return ledger.RunsAs[ormlock.Run](verbs.Runs(ctx, binder{pool}, pkg, job, limit, opts))
}

// Prune deletes the ledger's finished runs whose slot is older than
// olderThan by the database server's clock, batch by batch, and returns how
// many it deleted: gormlock.Prune's twin (an olderThan shorter than the
// catch-up window given with it plus 1 minute is refused).
func Prune(ctx context.Context, pool *pgxpool.Pool, olderThan time.Duration, opts ...ormlock.Option) (int64, error) {
	return verbs.Prune(ctx, binder{pool}, pkg, olderThan, opts)
}

// AdvanceFences adds by to every fencing counter of the namespace in
// effect and returns how many it moved, as sqllock.AdvanceFences does:
// the remedy after promoting an asynchronous replica. See
// docs/PROTOCOL.md (Failover).
func AdvanceFences(ctx context.Context, pool *pgxpool.Pool, by int64, opts ...ormlock.Option) (int64, error) {
	return verbs.AdvanceFences(ctx, binder{pool}, pkg, by, opts)
}

// locked hands fn the pgx.Tx over a locked transaction; fn may end it
// itself (errEnded then tells the verb that nothing is left to commit).
func locked(fn func(ctx context.Context, tx pgx.Tx) error) verbs.Locked {
	return func(ctx context.Context, lt *lockproto.LockedTx) error {
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
