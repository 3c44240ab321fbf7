package sqllock

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/verbs"
)

// Transaction is ormlock's Transaction (see [ormlock], The verbs) on db:
// fn gets a *sql.Tx begun by database/sql (its own BEGIN), with the lock
// taken as the transaction's first statement, and a ctx that carries the
// fencing token; fn must not commit or roll tx back itself.
func Transaction[K ormlock.KeyType](ctx context.Context, db *sql.DB, key K, fn func(ctx context.Context, tx *sql.Tx) error, opts ...ormlock.Option) error {
	return verbs.Transaction(ctx, binder{db}, pkg, keys.Of[ormlock.Key](key), fn, locked, fn == nil, opts)
}

// Lock takes the lock named by key in tx, a transaction the caller began
// and ends (bun's RunInTx, sqlc's WithTx, db.BeginTx), and returns nil once
// it is held: PostgreSQL's transaction-level lock, which tx's COMMIT or
// ROLLBACK releases (so does a ROLLBACK TO a savepoint taken before it),
// with the keys and shapes of the other verbs. It tries once
// ([ormlock.ErrNotAcquired] when the lock is held) unless
// [ormlock.WithWait] is given; after ErrNotAcquired, or any failure but
// that of tx's connection, tx is as it was and may go on (the lock is
// taken in a savepoint, rolled back to on failure). tx must be at READ
// COMMITTED (PostgreSQL's default): above it, tx's snapshot predates the
// lock and Lock returns [ormlock.ErrInvalidArgument]. MySQL/MariaDB's named
// lock outlives a transaction: [ormlock.ErrUnsupportedDialect] there (use
// [Transaction]). [ormlock.WithFencing], [ormlock.WithTxOptions],
// [ormlock.WithClaim] and [ormlock.WithCatchUp] cannot be honoured in tx:
// ErrInvalidArgument. See the package doc (A lock in your transaction) and
// docs/PROTOCOL.md (Nested calls).
func Lock[K ormlock.KeyType](ctx context.Context, tx *sql.Tx, key K, opts ...ormlock.Option) error {
	return verbs.Lock(ctx, txBinder{tx}, pkg, keys.Of[ormlock.Key](key), opts)
}

// Session is ormlock's Session on a dedicated connection of db; fn works
// through db with the ctx it is given.
func Session[K ormlock.KeyType](ctx context.Context, db *sql.DB, key K, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
	return verbs.Session(ctx, binder{db}, pkg, keys.Of[ormlock.Key](key), fn, opts)
}

// Lead is ormlock's Lead on db: each term is a [Session]; ctx ends the
// campaign. A leader asked to step down ([Act] with [ormlock.Resign])
// sees fn's ctx cancelled with a cause wrapping [ormlock.ErrLockLost]
// within one keepalive (lease renewal) interval and stays out for the
// cooldown; [ormlock.WithoutCampaign] follows without campaigning (see
// gormlock.Lead).
func Lead[K ormlock.KeyType](ctx context.Context, db *sql.DB, key K, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
	return verbs.Lead(ctx, binder{db}, pkg, keys.Of[ormlock.Key](key), fn, opts)
}

// RunOnce is ormlock's RunOnce on db, on the same lock and ledger rows as
// gormlock.RunOnce and entlock.RunOnce: fn's tx is the locked transaction
// that also writes the ledger row; with [ormlock.WithClaim] it is a
// transaction of its own, begun on a ctx that ends with cause
// [ormlock.ErrLockLost] if the lock is lost (nil with
// schedhook.ClaimNoTx). A job name is valid UTF-8 without NUL bytes or a
// trailing space, at most 191 characters.
func RunOnce(ctx context.Context, db *sql.DB, job string, slot time.Time, fn func(ctx context.Context, tx *sql.Tx) error, opts ...ormlock.Option) error {
	return verbs.RunOnce(ctx, binder{db}, pkg, job, slot, fn, locked, claimed(fn), fn == nil, opts)
}

// RunScheduled is [RunOnce] for the slot of schedule at the current time,
// and with [ormlock.WithCatchUp] for the missed slots first.
func RunScheduled(ctx context.Context, db *sql.DB, job string, schedule ormlock.Schedule, fn func(ctx context.Context, tx *sql.Tx) error, opts ...ormlock.Option) error {
	return verbs.RunScheduled(ctx, binder{db}, pkg, job, schedule, fn == nil, opts, func(slot time.Time) error { return RunOnce(ctx, db, job, slot, fn, opts...) })
}

// Migrate is ormlock's Migrate on db: it creates or upgrades the ledger
// and fence tables under a lock of its own, so every instance may call it
// at start-up.
func Migrate(ctx context.Context, db *sql.DB, opts ...ormlock.Option) error {
	return verbs.Migrate(ctx, binder{db}, pkg, opts)
}

// Holder asks the server behind db who holds the lock named by key.
func Holder[K ormlock.KeyType](ctx context.Context, db *sql.DB, key K, opts ...ormlock.Option) (ormlock.HolderInfo, error) {
	h, err := verbs.Holder(ctx, binder{db}, pkg, keys.Of[ormlock.Key](key), opts)
	return ormlock.HolderInfo(h), err
}

// Holders returns every holder of key behind db, whatever its shape (see
// gormlock.Holders).
func Holders[K ormlock.KeyType](ctx context.Context, db *sql.DB, key K, opts ...ormlock.Option) ([]ormlock.HolderInfo, error) {
	return lockproto.HoldersAs[ormlock.HolderInfo](verbs.Holders(ctx, binder{db}, pkg, keys.Of[ormlock.Key](key), opts))
}

// Runs returns the last limit runs of job from the ledger, newest slot
// first, in the namespace in effect, stale runs marked ([ormlock.Run]
// Stale).
func Runs(ctx context.Context, db *sql.DB, job string, limit int, opts ...ormlock.Option) ([]ormlock.Run, error) {
	return ledger.RunsAs[ormlock.Run](verbs.Runs(ctx, binder{db}, pkg, job, limit, opts))
}

// Prune is ormlock's Prune on db: finished and stale runs (never a
// 'running' one whose lock is held) whose slot is older than olderThan by
// the database server's clock, batch by batch (an olderThan
// shorter than the catch-up window given with it plus 1 minute is
// refused).
// It also deletes the lease rows expired for longer than olderThan
// (docs/PROTOCOL.md, Leases).
func Prune(ctx context.Context, db *sql.DB, olderThan time.Duration, opts ...ormlock.Option) (int64, error) {
	return verbs.Prune(ctx, binder{db}, pkg, olderThan, opts)
}

// AdvanceFences adds by (1..2^52) to every fencing counter of the
// namespace in effect and returns how many it moved: after promoting an
// asynchronous replica, which may lack the last tokens the old primary
// issued. See docs/PROTOCOL.md (Failover).
func AdvanceFences(ctx context.Context, db *sql.DB, by int64, opts ...ormlock.Option) (int64, error) {
	return verbs.AdvanceFences(ctx, binder{db}, pkg, by, opts)
}

const pkg = "sqllock"

// binder is sqllock's binding of the verb core: the *sql.DB itself, its
// dialect told by its driver (or asked of the server once per pool), and
// the call's options; fn's transaction is a *sql.Tx begun by database/sql.
type binder struct{ db *sql.DB }

func (b binder) Nil() string { return verbs.NilIf(b.db == nil, "*sql.DB") }

func (b binder) Bind(ctx context.Context, verb string, opts []config.Option) (verbs.Pool, error) {
	d, err := dialectOf(ctx, verb, b.db)
	if err != nil {
		return verbs.Pool{}, err
	}
	return verbs.Pool{Pkg: pkg, DB: b.db, Dialect: d, Cfg: config.New(opts...), NeedSQLTx: true}, nil
}

// txBinder is sqllock's binding of Lock: the caller's *sql.Tx, whose pool
// and driver database/sql does not show. Its dialect is PostgreSQL's, the
// only one Lock serves: the nested check's first statement, PostgreSQL's,
// tells another server by its error and refuses it
// (lockproto.CheckNested), which also checks the server there.
type txBinder struct{ tx *sql.Tx }

func (b txBinder) Nil() string { return verbs.NilIf(b.tx == nil, "*sql.Tx") }

func (b txBinder) Bind(_ context.Context, _ string, opts []config.Option) (verbs.Pool, error) {
	return verbs.Pool{Pkg: pkg, Dialect: lockproto.Postgres, Cfg: config.New(opts...), Tx: b.tx, NoCheck: true}, nil
}

// locked hands fn the *sql.Tx of a locked transaction.
func locked(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error, lt *lockproto.LockedTx) error {
	tx, ok := lt.Tx.(*sql.Tx)
	if !ok { // BeginLocked gives a *sql.Tx when NeedSQLTx is set
		return fmt.Errorf("ormlock: sqllock: transaction of type %T, want *sql.Tx", lt.Tx)
	}
	return fn(ctx, tx)
}

// claimed runs fn in a transaction of its own on the pool (RunOnce's claim
// mode); with schedhook.ClaimNoTx fn gets a nil tx.
func claimed(fn func(ctx context.Context, tx *sql.Tx) error) verbs.Claimed {
	return func(ctx context.Context, p verbs.Pool) error {
		if p.Cfg.ClaimNoTx {
			return fn(ctx, nil)
		}
		tx, err := p.DB.BeginTx(ctx, p.Cfg.TxOptions)
		if err != nil {
			return errs.Wrap(err, "sqllock.RunOnce: begin fn's transaction")
		}
		return lockproto.RunTx(ctx, tx, "sqllock.RunOnce", func() error { return fn(ctx, tx) })
	}
}

// Usage reads the tokens of the rate limit key ([ormlock.Rate]) in use
// behind db (see gormlock.Usage).
func Usage(ctx context.Context, db *sql.DB, key ormlock.Key, opts ...ormlock.Option) (ormlock.RateUsage, error) {
	return verbs.Usage(ctx, binder{db}, pkg, key, opts)
}
