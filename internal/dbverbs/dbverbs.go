// Package dbverbs is the body of the verbs of the adapters that take a
// driver's own pool rather than an ORM (sqllock on *sql.DB, pgxlock on
// *pgxpool.Pool, which it reaches through pgx's database/sql driver): the
// checks of their arguments and the calls into internal/lockproto and
// internal/ledger. Each adapter only says how it hands the transaction to
// fn.
package dbverbs

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/sched"
)

// Pool is one adapter's pool for one call: the *sql.DB the protocol runs
// on, its dialect, and the adapter's package name for error texts
// ("sqllock", "pgxlock").
type Pool struct {
	Pkg string
	DB  *sql.DB
	// Key, when set, is the *sql.DB under which what the protocol learns
	// of the server is cached, when DB lives for one call only (pgxlock).
	Key     *sql.DB
	Dialect lockproto.Dialect
	// NeedSQLTx asks BeginLocked for a *sql.Tx (BEGIN through
	// database/sql, then the lock) rather than the one-message path.
	NeedSQLTx bool
	// SplitTx, when set, begins fn's transaction of the split protocol
	// (see lockproto.Op.SplitTx).
	SplitTx func(ctx context.Context, db *sql.DB, opts *sql.TxOptions) (lockproto.Tx, error)
}

// Check validates what every verb is given: a context, a pool (poolType
// names it when nilPool), valid options, and fn (nilFn when it is nil).
func Check(ctx context.Context, pkg, verb, poolType string, nilPool, nilFn bool, opts []ormlock.Option) (config.Config, error) {
	if ctx == nil {
		return config.Config{}, fmt.Errorf("%w: %s.%s: nil context", ormlock.ErrInvalidArgument, pkg, verb)
	}
	if nilPool {
		return config.Config{}, fmt.Errorf("%w: %s.%s: nil %s", ormlock.ErrInvalidArgument, pkg, verb, poolType)
	}
	cfg := config.New(opts...)
	if err := cfg.Err(); err != nil {
		return cfg, err
	}
	if nilFn {
		return cfg, fmt.Errorf("%w: %s.%s: nil fn", ormlock.ErrInvalidArgument, pkg, verb)
	}
	return cfg, nil
}

// op builds the Op of a verb on key; then a context that has ended returns
// at once, sending nothing (for a verb that takes a lock for its caller,
// lock, an error wrapping ormlock.ErrNotAcquired and the context's error;
// else the context's error); then the server is asked, once per pool,
// whether its locks are real (lockproto.Op.CheckServer). When only that
// question failed, the Op is returned with its error.
func (p Pool) op(ctx context.Context, verb string, k ormlock.Key, cfg config.Config, lock bool) (*lockproto.Op, error) {
	op, err := lockproto.NewOp(p.Dialect, verb, k, cfg)
	if err != nil {
		return nil, err
	}
	op.NeedSQLTx = p.NeedSQLTx
	op.SplitTx = p.SplitTx
	if lock {
		err = op.EndedLock(ctx)
	} else {
		err = lockproto.Ended(ctx)
	}
	if err != nil {
		return nil, err
	}
	if err := op.CheckServerOn(ctx, p.cacheKey(), p.DB); err != nil {
		return op, err // the Op is valid; Lead retries a connection error
	}
	return op, nil
}

// cacheKey is the *sql.DB under which the server check's answer is cached.
func (p Pool) cacheKey() *sql.DB {
	if p.Key != nil {
		return p.Key
	}
	return p.DB
}

// checkPool is the server check of the verbs that build no Op (Runs,
// Prune): a context that has ended returns its error first, sending
// nothing.
func (p Pool) checkPool(ctx context.Context) error {
	if err := lockproto.Ended(ctx); err != nil {
		return err
	}
	return lockproto.CheckPool(ctx, p.Dialect, p.cacheKey(), p.DB)
}

// Locked is fn's side of a Transaction: it runs with ctx (carrying the
// fencing token) on the transaction lt, begun with the lock held.
type Locked func(ctx context.Context, lt *lockproto.LockedTx) error

// Transaction runs fn in a transaction begun with k's lock held, commits
// when fn returns nil and rolls back otherwise (a panic included), then
// releases the lock.
func (p Pool) Transaction(ctx context.Context, k ormlock.Key, cfg config.Config, fn Locked) error {
	op, err := p.op(ctx, "Transaction", k, cfg, true)
	if err != nil {
		return err
	}
	return p.transaction(ctx, op, fn)
}

func (p Pool) transaction(ctx context.Context, op *lockproto.Op, fn Locked) error {
	lt, err := op.BeginLocked(ctx, p.DB, op.Cfg.TxOptions)
	if err != nil {
		return err
	}
	return lockproto.RunTx(ctx, lt, p.Pkg+"."+op.Verb, func() error { return fn(op.TokenContext(ctx), lt) })
}

// Session holds k's lock on a dedicated connection while fn runs.
func (p Pool) Session(ctx context.Context, k ormlock.Key, cfg config.Config, fn func(ctx context.Context) error) error {
	op, err := p.op(ctx, "Session", k, cfg, true)
	if err != nil {
		return err
	}
	return op.Session(ctx, p.DB, fn)
}

// Lead campaigns for k and runs fn while elected (lockproto.Op.Campaign),
// asking the server about its locks at every term, under the pool's cache
// key (so an accepted server is asked once per pool, not once per term). A
// connection error of the first such check is left to the campaign's
// retries; an invalid key or option, an ended context, or any other
// permanent error, is returned at once.
func (p Pool) Lead(ctx context.Context, k ormlock.Key, cfg config.Config, fn func(ctx context.Context) error) error {
	op, err := p.op(ctx, "Lead", k, cfg, true)
	if err != nil {
		if op == nil || lockproto.Permanent(err) {
			return err
		}
	}
	return op.Campaign(ctx, func(ctx context.Context, term *lockproto.Op, fn func(ctx context.Context) error) error {
		if err := term.CheckServerOn(ctx, p.cacheKey(), p.DB); err != nil {
			return err
		}
		return term.Session(ctx, p.DB, fn)
	}, fn)
}

// RunOnce runs fn at most once per (job, slot). In the ledger's default
// mode fn is a Locked: it runs in the transaction that holds the lock and
// writes the ledger row. In claim mode (ormlock.WithClaim) claimed runs
// instead, outside that transaction, with the lock session's context.
func (p Pool) RunOnce(ctx context.Context, job string, slot time.Time, cfg config.Config, fn Locked, claimed func(ctx context.Context) error) error {
	verb := p.Pkg + ".RunOnce"
	// fn was checked with the pool
	if err := ledger.CheckRunOnce(verb, false, job, slot); err != nil {
		return err
	}
	op, err := p.op(ctx, "RunOnce", ormlock.RunKey(job, slot), cfg, true)
	if err != nil {
		return err
	}
	r, err := ledger.NewRun(verb, op, job, slot)
	if err != nil {
		return err
	}
	ctx = sched.WithSlot(ctx, keys.NormalizeSlot(slot)) // fn reads it with ormlock.Slot
	if cfg.Claim {
		return r.Claimed(ctx, p.DB, claimed)
	}
	return p.transaction(ctx, op, func(tctx context.Context, lt *lockproto.LockedTx) error {
		return r.InTx(ctx, lt.Tx, func() error { return fn(tctx, lt) })
	})
}

// CheckSchedule refuses a nil schedule, before the pool is looked at.
func CheckSchedule(pkg string, schedule ormlock.Schedule) error {
	if schedule == nil {
		return fmt.Errorf("%w: %s.RunScheduled: nil schedule", ormlock.ErrInvalidArgument, pkg)
	}
	return nil
}

// RunScheduled runs run (the adapter's RunOnce on this pool) for the slot
// of schedule (checked by CheckSchedule) at the current time, and first,
// with ormlock.WithCatchUp, for the missed slots before it (see
// ledger.Scheduled).
func (p Pool) RunScheduled(ctx context.Context, job string, schedule ormlock.Schedule, cfg config.Config, run func(slot time.Time) error) error {
	return ledger.Scheduled(ctx, p.Pkg+".RunScheduled", job, schedule, func() (ledger.Reader, error) {
		t, err := ledger.NewTable(p.Dialect, cfg.LedgerTable)
		if err != nil {
			return ledger.Reader{}, err
		}
		return ledger.Reader{Cfg: cfg, T: t, Q: p.DB}, nil
	}, run)
}

// Migrate creates or upgrades the ledger table, under the migration lock.
func (p Pool) Migrate(ctx context.Context, cfg config.Config) error {
	cfg = cfg.With(ormlock.WithWait(max(cfg.Wait, ledger.MigrateWait)), ormlock.WithNamespace(""))
	op, err := p.op(ctx, "Migrate", ledger.MigrateKey(cfg.LedgerTable), cfg, false)
	if err != nil {
		return err
	}
	return ledger.Migrate(ctx, p.DB, op)
}

// Holder asks the server who holds k.
func (p Pool) Holder(ctx context.Context, k ormlock.Key, cfg config.Config) (ormlock.HolderInfo, error) {
	op, err := p.op(ctx, "Holder", k, cfg, false)
	if err != nil {
		return ormlock.HolderInfo{}, err
	}
	return lockproto.LookupHolder(ctx, p.DB, op)
}

// Runs reads the last limit runs of job from the ledger.
func (p Pool) Runs(ctx context.Context, job string, limit int, cfg config.Config) ([]ormlock.Run, error) {
	verb := p.Pkg + ".Runs"
	if err := ledger.CheckRuns(verb, job, limit); err != nil {
		return nil, err
	}
	t, err := ledger.NewTable(p.Dialect, cfg.LedgerTable)
	if err == nil {
		err = p.checkPool(ctx)
	}
	if err != nil {
		return nil, err
	}
	return t.Runs(ctx, p.DB, cfg.Namespace, job, limit)
}

// AdvanceFences moves every fencing counter of the namespace by by.
func (p Pool) AdvanceFences(ctx context.Context, by int64, cfg config.Config) (int64, error) {
	return ledger.AdvanceFences(ctx, p.DB, p.Dialect, p.Pkg+".AdvanceFences", by, cfg)
}

// Prune deletes the ledger's finished rows older than olderThan.
func (p Pool) Prune(ctx context.Context, olderThan time.Duration, cfg config.Config) (int64, error) {
	if err := ledger.CheckPrune(p.Pkg+".Prune", olderThan); err != nil {
		return 0, err
	}
	if err := ledger.CheckCatchUp(p.Pkg+".Prune", olderThan, cfg); err != nil {
		return 0, err
	}
	t, err := ledger.NewTable(p.Dialect, cfg.LedgerTable)
	if err == nil {
		err = p.checkPool(ctx)
	}
	if err != nil {
		return 0, err
	}
	return t.PruneOlderThan(ctx, p.DB, cfg.Namespace, olderThan, ledger.PruneBatch)
}
