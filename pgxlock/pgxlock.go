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
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/dbverbs"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/sched"
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
	p, cfg, done, err := open(ctx, "Transaction", pool, fn == nil, opts)
	if err != nil {
		return err
	}
	defer done()
	return notPostgres(ended(p.Transaction(ctx, lockproto.KeyOf(key), cfg, locked(fn))))
}

// locked hands fn a pgx.Tx on the locked transaction.
func locked(fn func(ctx context.Context, tx pgx.Tx) error) dbverbs.Locked {
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

// ended maps the outcome of a transaction fn ended itself with success.
func ended(err error) error {
	if errors.Is(err, errEnded) {
		return nil
	}
	return err
}

// Session holds the lock named by key on a dedicated connection of pool for
// as long as fn runs; fn works through the pool with the ctx it is given,
// not inside one long transaction. A keepalive ([ormlock.WithKeepalive],
// default 2s) cancels fn's ctx with cause [ormlock.ErrLockLost] when the
// lock is lost, and Session's error then wraps ErrLockLost. See
// docs/PROTOCOL.md (Session).
func Session[K ormlock.KeyType](ctx context.Context, pool *pgxpool.Pool, key K, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
	p, cfg, done, err := open(ctx, "Session", pool, fn == nil, opts)
	if err != nil {
		return err
	}
	defer done()
	return notPostgres(p.Session(ctx, lockproto.KeyOf(key), cfg, fn))
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
	p, cfg, done, err := open(ctx, "RunOnce", pool, fn == nil, opts)
	if err != nil {
		return err
	}
	defer done()
	return runOnce(ctx, p, pool, job, slot, cfg, fn)
}

func runOnce(ctx context.Context, p dbverbs.Pool, pool *pgxpool.Pool, job string, slot time.Time, cfg config.Config, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return notPostgres(ended(p.RunOnce(ctx, job, slot, cfg, locked(fn), func(lctx context.Context) error {
		return claimed(lctx, pool, cfg.TxOptions, fn)
	})))
}

// RunScheduled is [RunOnce] for the slot of schedule at the current time.
func RunScheduled(ctx context.Context, pool *pgxpool.Pool, job string, schedule ormlock.Schedule, fn func(ctx context.Context, tx pgx.Tx) error, opts ...ormlock.Option) error {
	if err := dbverbs.CheckSchedule("pgxlock", schedule); err != nil {
		return err
	}
	p, cfg, done, err := open(ctx, "RunScheduled", pool, fn == nil, opts)
	if err != nil {
		return err
	}
	defer done()
	return p.RunScheduled(ctx, job, schedule, cfg, func(slot time.Time) error { return runOnce(ctx, p, pool, job, slot, cfg, fn) })
}

// Migrate creates the ledger table (and the fencing table) of RunOnce and
// [ormlock.WithFencing], or upgrades them, under a lock of its own, so that
// every instance may call it at start-up. See docs/PROTOCOL.md (The ledger).
func Migrate(ctx context.Context, pool *pgxpool.Pool, opts ...ormlock.Option) error {
	p, cfg, done, err := open(ctx, "Migrate", pool, false, opts)
	if err != nil {
		return err
	}
	defer done()
	return notPostgres(p.Migrate(ctx, cfg))
}

// Holder asks the server who holds the lock named by key.
func Holder[K ormlock.KeyType](ctx context.Context, pool *pgxpool.Pool, key K, opts ...ormlock.Option) (ormlock.HolderInfo, error) {
	p, cfg, done, err := open(ctx, "Holder", pool, false, opts)
	if err != nil {
		return ormlock.HolderInfo{}, err
	}
	defer done()
	h, err := p.Holder(ctx, lockproto.KeyOf(key), cfg)
	return h, notPostgres(err)
}

// Runs returns the last limit runs of job from the ledger table, newest
// slot first, in the namespace in effect ([ormlock.WithNamespace]).
func Runs(ctx context.Context, pool *pgxpool.Pool, job string, limit int, opts ...ormlock.Option) ([]ormlock.Run, error) {
	p, cfg, done, err := open(ctx, "Runs", pool, false, opts)
	if err != nil {
		return nil, err
	}
	defer done()
	rs, err := p.Runs(ctx, job, limit, cfg)
	return rs, notPostgres(err)
}

// Prune deletes the ledger's finished runs whose slot is older than
// olderThan by the database server's clock, batch by batch, and returns how
// many it deleted: gormlock.Prune's twin (an olderThan shorter than the
// catch-up window given with it plus 1 minute is refused).
func Prune(ctx context.Context, pool *pgxpool.Pool, olderThan time.Duration, opts ...ormlock.Option) (int64, error) {
	p, cfg, done, err := open(ctx, "Prune", pool, false, opts)
	if err != nil {
		return 0, err
	}
	defer done()
	n, err := p.Prune(ctx, olderThan, cfg)
	return n, notPostgres(err)
}

// AdvanceFences adds by to every fencing counter of the namespace in
// effect and returns how many it moved, as sqllock.AdvanceFences does:
// the remedy after promoting an asynchronous replica. See
// docs/PROTOCOL.md (Failover).
func AdvanceFences(ctx context.Context, pool *pgxpool.Pool, by int64, opts ...ormlock.Option) (int64, error) {
	p, cfg, done, err := open(ctx, "AdvanceFences", pool, false, opts)
	if err != nil {
		return 0, err
	}
	defer done()
	n, err := p.AdvanceFences(ctx, by, cfg)
	return n, notPostgres(err)
}

// claimed runs fn in a transaction of its own on pool (RunOnce's claim
// mode), with the isolation level and read-only mode of
// [ormlock.WithTxOptions] if given.
// The scheduler backend (scheduler/pgxsched) asks for no transaction
// (sched.WithBareClaim): its job gets a nil tx and a ctx without the ask.
func claimed(ctx context.Context, pool *pgxpool.Pool, opts *sql.TxOptions, fn func(ctx context.Context, tx pgx.Tx) error) error {
	if sched.BareClaim(ctx) {
		return fn(sched.WithBareClaim(ctx, false), nil)
	}
	topts, err := pgxOptions(opts)
	if err != nil {
		return err
	}
	tx, err := pool.BeginTx(ctx, topts)
	if err != nil {
		return errs.Wrap(err, "pgxlock.RunOnce: begin fn's transaction")
	}
	return lockproto.RunTx(ctx, claimTx{ctx, tx}, "pgxlock.RunOnce", func() error { return fn(ctx, tx) })
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
