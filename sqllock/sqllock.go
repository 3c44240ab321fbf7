package sqllock

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/dbverbs"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/sched"
)

// Transaction runs fn in a transaction of db while the lock named by key is
// held, and returns fn's error unchanged; key is a name, an id or an
// [ormlock.Key]. fn gets a *sql.Tx begun by database/sql (its own BEGIN),
// with the lock taken as the transaction's first statement, and a ctx that
// carries the fencing token ([ormlock.FencingToken]); fn must not commit or
// roll tx back itself. The transaction commits when fn returns nil and rolls
// back otherwise (a panic included). It tries once
// ([ormlock.ErrNotAcquired] when the lock is held, fn not called) unless
// [ormlock.WithWait] is given. Protocol per dialect, isolation levels and
// cancellation: docs/PROTOCOL.md.
func Transaction[K ormlock.KeyType](ctx context.Context, db *sql.DB, key K, fn func(ctx context.Context, tx *sql.Tx) error, opts ...ormlock.Option) error {
	p, cfg, err := pool(ctx, "Transaction", db, fn == nil, opts)
	if err != nil {
		return err
	}
	return p.Transaction(ctx, lockproto.KeyOf(key), cfg, locked(fn))
}

// locked hands fn the *sql.Tx of a locked transaction.
func locked(fn func(ctx context.Context, tx *sql.Tx) error) dbverbs.Locked {
	return func(ctx context.Context, lt *lockproto.LockedTx) error {
		tx, ok := lt.Tx.(*sql.Tx)
		if !ok { // BeginLocked gives a *sql.Tx when NeedSQLTx is set
			return fmt.Errorf("ormlock: sqllock: transaction of type %T, want *sql.Tx", lt.Tx)
		}
		return fn(ctx, tx)
	}
}

// Session holds the lock named by key on a dedicated connection of db for
// as long as fn runs; fn works through db with the ctx it is given, not
// inside one long transaction. A keepalive ([ormlock.WithKeepalive],
// default 2s) cancels fn's ctx with cause [ormlock.ErrLockLost] when the
// lock is lost, and Session's error then wraps ErrLockLost. See
// docs/PROTOCOL.md (Session).
func Session[K ormlock.KeyType](ctx context.Context, db *sql.DB, key K, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
	p, cfg, err := pool(ctx, "Session", db, fn == nil, opts)
	if err != nil {
		return err
	}
	return p.Session(ctx, lockproto.KeyOf(key), cfg, fn)
}

// RunOnce runs fn at most once per (job, slot) across every instance that
// shares the database, and records the run in the ledger table
// ([Migrate]): the same lock and rows as gormlock.RunOnce and
// entlock.RunOnce. slot is the scheduled time, never time.Now(). A slot
// already done returns [ormlock.ErrAlreadyDone]. fn's tx is the locked
// transaction that also writes the ledger row; with [ormlock.WithClaim] it
// is a transaction of its own, begun on a ctx that ends with cause
// [ormlock.ErrLockLost] if the lock is lost. A job name is valid UTF-8 without NUL bytes or a trailing space, at most
// 191 characters; bad input wraps [ormlock.ErrInvalidArgument].
// See docs/PROTOCOL.md (RunOnce).
func RunOnce(ctx context.Context, db *sql.DB, job string, slot time.Time, fn func(ctx context.Context, tx *sql.Tx) error, opts ...ormlock.Option) error {
	p, cfg, err := pool(ctx, "RunOnce", db, fn == nil, opts)
	if err != nil {
		return err
	}
	return runOnce(ctx, p, job, slot, cfg, fn)
}

func runOnce(ctx context.Context, p dbverbs.Pool, job string, slot time.Time, cfg config.Config, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return p.RunOnce(ctx, job, slot, cfg, locked(fn), func(lctx context.Context) error {
		return claimed(lctx, p.DB, cfg.TxOptions, fn)
	})
}

// claimed runs fn in a transaction of its own on db (RunOnce's claim mode).
// The scheduler backend (scheduler/sqlsched) asks for no transaction
// (sched.WithBareClaim): its job gets a nil tx and a ctx without the ask.
func claimed(ctx context.Context, db *sql.DB, opts *sql.TxOptions, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if sched.BareClaim(ctx) {
		return fn(sched.WithBareClaim(ctx, false), nil)
	}
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return errs.Wrap(err, "sqllock.RunOnce: begin fn's transaction")
	}
	return lockproto.RunTx(ctx, tx, "sqllock.RunOnce", func() error { return fn(ctx, tx) })
}

// RunScheduled is [RunOnce] for the slot of schedule at the current time.
func RunScheduled(ctx context.Context, db *sql.DB, job string, schedule ormlock.Schedule, fn func(ctx context.Context, tx *sql.Tx) error, opts ...ormlock.Option) error {
	if err := dbverbs.CheckSchedule("sqllock", schedule); err != nil {
		return err
	}
	p, cfg, err := pool(ctx, "RunScheduled", db, fn == nil, opts)
	if err != nil {
		return err
	}
	return p.RunScheduled(ctx, job, schedule, cfg, func(slot time.Time) error { return runOnce(ctx, p, job, slot, cfg, fn) })
}

// Migrate creates the ledger table (and the fencing table) of RunOnce and
// [ormlock.WithFencing], or upgrades them, under a lock of its own, so that
// every instance may call it at start-up. See docs/PROTOCOL.md (The ledger).
func Migrate(ctx context.Context, db *sql.DB, opts ...ormlock.Option) error {
	p, cfg, err := pool(ctx, "Migrate", db, false, opts)
	if err != nil {
		return err
	}
	return p.Migrate(ctx, cfg)
}

// Holder asks the server who holds the lock named by key, as
// gormlock.Holder does.
func Holder[K ormlock.KeyType](ctx context.Context, db *sql.DB, key K, opts ...ormlock.Option) (ormlock.HolderInfo, error) {
	p, cfg, err := pool(ctx, "Holder", db, false, opts)
	if err != nil {
		return ormlock.HolderInfo{}, err
	}
	return p.Holder(ctx, lockproto.KeyOf(key), cfg)
}

// Runs returns the last limit runs of job from the ledger table, newest
// slot first, in the namespace in effect ([ormlock.WithNamespace]).
func Runs(ctx context.Context, db *sql.DB, job string, limit int, opts ...ormlock.Option) ([]ormlock.Run, error) {
	p, cfg, err := pool(ctx, "Runs", db, false, opts)
	if err != nil {
		return nil, err
	}
	return p.Runs(ctx, job, limit, cfg)
}

// Prune deletes the ledger's finished runs whose slot is older than
// olderThan by the database server's clock, batch by batch, and returns how
// many it deleted: gormlock.Prune's twin (an olderThan shorter than the
// catch-up window given with it plus 1 minute is refused).
func Prune(ctx context.Context, db *sql.DB, olderThan time.Duration, opts ...ormlock.Option) (int64, error) {
	p, cfg, err := pool(ctx, "Prune", db, false, opts)
	if err != nil {
		return 0, err
	}
	return p.Prune(ctx, olderThan, cfg)
}

// AdvanceFences adds by to every fencing counter of the namespace in
// effect and returns how many it moved: after promoting an asynchronous
// replica, which may lack the last tokens the old primary issued, every
// token issued afterwards is greater than those when by exceeds the
// tokens issued per key in the replication lag. by is in 1..2^52. See
// docs/PROTOCOL.md (Failover).
func AdvanceFences(ctx context.Context, db *sql.DB, by int64, opts ...ormlock.Option) (int64, error) {
	p, cfg, err := pool(ctx, "AdvanceFences", db, false, opts)
	if err != nil {
		return 0, err
	}
	return p.AdvanceFences(ctx, by, cfg)
}

// pool checks a verb's arguments and returns db as the protocol's pool.
func pool(ctx context.Context, verb string, db *sql.DB, nilFn bool, opts []ormlock.Option) (dbverbs.Pool, config.Config, error) {
	cfg, err := dbverbs.Check(ctx, "sqllock", verb, "*sql.DB", db == nil, nilFn, opts)
	if err != nil {
		return dbverbs.Pool{}, cfg, err
	}
	d, err := dialectOf(ctx, verb, db)
	if err != nil {
		return dbverbs.Pool{}, cfg, err
	}
	return dbverbs.Pool{Pkg: "sqllock", DB: db, Dialect: d, NeedSQLTx: true}, cfg, nil
}
