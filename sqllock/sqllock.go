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
	return verbs.Transaction(ctx, binder{db}, pkg, keys.Of[ormlock.Key](key), locked(fn), fn == nil, opts)
}

// Session holds the lock named by key on a dedicated connection of db for
// as long as fn runs; fn works through db with the ctx it is given, not
// inside one long transaction. A keepalive ([ormlock.WithKeepalive],
// default 2s) cancels fn's ctx with cause [ormlock.ErrLockLost] when the
// lock is lost, and Session's error then wraps ErrLockLost. See
// docs/PROTOCOL.md (Session).
func Session[K ormlock.KeyType](ctx context.Context, db *sql.DB, key K, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
	return verbs.Session(ctx, binder{db}, pkg, keys.Of[ormlock.Key](key), fn, opts)
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
// replica for [Holder]. An invalid key or option, an unsupported driver or
// a refused login is returned at once. See docs/PROTOCOL.md (Lead).
func Lead[K ormlock.KeyType](ctx context.Context, db *sql.DB, key K, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
	return verbs.Lead(ctx, binder{db}, pkg, keys.Of[ormlock.Key](key), fn, opts)
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
	return verbs.RunOnce(ctx, binder{db}, pkg, job, slot, locked(fn), claimed(fn), fn == nil, opts)
}

// RunScheduled is [RunOnce] for the slot of schedule at the current time.
func RunScheduled(ctx context.Context, db *sql.DB, job string, schedule ormlock.Schedule, fn func(ctx context.Context, tx *sql.Tx) error, opts ...ormlock.Option) error {
	return verbs.RunScheduled(ctx, binder{db}, pkg, job, schedule, fn == nil, opts, func(slot time.Time) error { return RunOnce(ctx, db, job, slot, fn, opts...) })
}

// Migrate creates the ledger table (and the fencing table) of RunOnce and
// [ormlock.WithFencing], or upgrades them, under a lock of its own, so that
// every instance may call it at start-up. See docs/PROTOCOL.md (The ledger).
func Migrate(ctx context.Context, db *sql.DB, opts ...ormlock.Option) error {
	return verbs.Migrate(ctx, binder{db}, pkg, opts)
}

// Holder asks the server who holds the lock named by key, as
// gormlock.Holder does.
func Holder[K ormlock.KeyType](ctx context.Context, db *sql.DB, key K, opts ...ormlock.Option) (ormlock.HolderInfo, error) {
	h, err := verbs.Holder(ctx, binder{db}, pkg, keys.Of[ormlock.Key](key), opts)
	return ormlock.HolderInfo(h), err
}

// Runs returns the last limit runs of job from the ledger table, newest
// slot first, in the namespace in effect ([ormlock.WithNamespace]).
func Runs(ctx context.Context, db *sql.DB, job string, limit int, opts ...ormlock.Option) ([]ormlock.Run, error) {
	return ledger.RunsAs[ormlock.Run](verbs.Runs(ctx, binder{db}, pkg, job, limit, opts))
}

// Prune deletes the ledger's finished runs whose slot is older than
// olderThan by the database server's clock, batch by batch, and returns how
// many it deleted: gormlock.Prune's twin (an olderThan shorter than the
// catch-up window given with it plus 1 minute is refused).
func Prune(ctx context.Context, db *sql.DB, olderThan time.Duration, opts ...ormlock.Option) (int64, error) {
	return verbs.Prune(ctx, binder{db}, pkg, olderThan, opts)
}

// AdvanceFences adds by to every fencing counter of the namespace in
// effect and returns how many it moved: after promoting an asynchronous
// replica, which may lack the last tokens the old primary issued, every
// token issued afterwards is greater than those when by exceeds the
// tokens issued per key in the replication lag. by is in 1..2^52. See
// docs/PROTOCOL.md (Failover).
func AdvanceFences(ctx context.Context, db *sql.DB, by int64, opts ...ormlock.Option) (int64, error) {
	return verbs.AdvanceFences(ctx, binder{db}, pkg, by, opts)
}

const pkg = "sqllock"

// binder is sqllock's binding of the verb core: the *sql.DB itself, its
// dialect told by its driver (or asked of the server once per pool), and
// the call's options; fn's transaction is a *sql.Tx begun by database/sql.
type binder struct{ db *sql.DB }

func (b binder) Nil() string {
	if b.db == nil {
		return "*sql.DB"
	}
	return ""
}

func (b binder) Bind(ctx context.Context, verb string, opts []config.Option) (verbs.Pool, error) {
	d, err := dialectOf(ctx, verb, b.db)
	if err != nil {
		return verbs.Pool{}, err
	}
	return verbs.Pool{Pkg: pkg, DB: b.db, Dialect: d, Cfg: config.New(opts...), NeedSQLTx: true}, nil
}

// locked hands fn the *sql.Tx of a locked transaction.
func locked(fn func(ctx context.Context, tx *sql.Tx) error) verbs.Locked {
	return func(ctx context.Context, lt *lockproto.LockedTx) error {
		tx, ok := lt.Tx.(*sql.Tx)
		if !ok { // BeginLocked gives a *sql.Tx when NeedSQLTx is set
			return fmt.Errorf("ormlock: sqllock: transaction of type %T, want *sql.Tx", lt.Tx)
		}
		return fn(ctx, tx)
	}
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
