// Package verbs is the body of every adapter's verbs, written once: the
// checks of their arguments in one order, option resolution, the server
// check, error wrapping, and the calls into internal/lockproto and
// internal/ledger. An adapter (gormlock, entlock, sqllock, pgxlock)
// supplies a [Binder], which finds what stands behind its handle for one
// call (the dialect, the primary's *sql.DB, the defaults, the caller's
// transaction if the handle is inside one), and, for Transaction and
// RunOnce, a [Driver]: how fn gets its transaction; its exported verbs
// forward here in a few lines. The contracts are stated on the root's names and in
// docs/PROTOCOL.md; this package says how they are kept.
//
// # Error precedence
//
// When several things are wrong with one call, every verb of every adapter
// returns the first in the order docs/PROTOCOL.md (The verbs on each
// server, Error precedence) states, the one place it is written; the steps
// this package's docs number (step 4, steps 6 to 8) are that list's.
// [Prepare] and [Open] keep the order; precedence_test.go checks it.
package verbs

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/lockproto"
	_ "github.com/ormlock/ormlock/internal/pgxdriver" // pgx's connections, for every adapter (lockproto.RegisterPgDriver)
	"github.com/ormlock/ormlock/internal/sched"
)

// Pool is what stands behind an adapter's handle for one call.
type Pool struct {
	// Pkg is the adapter's package name, for error texts ("gormlock").
	Pkg string
	// Dialect is the server's.
	Dialect lockproto.Dialect
	// DB is the primary's pool, where the protocol runs; nil when Lazy
	// stands for it.
	DB *sql.DB
	// CacheKey, when set, is the *sql.DB under which what the protocol
	// learns of the server is cached, when DB lives for one call only
	// (pgxlock); nil means DB.
	CacheKey *sql.DB
	// Cfg is the handle's defaults with the call's options applied.
	Cfg config.Config
	// Tx, when set, is the caller's transaction that the handle is inside
	// (a *gorm.DB in db.Transaction): the server check, Holder, Runs and
	// RunScheduled's catch-up run in it, and the verbs that commit on their
	// own (Prune, AdvanceFences, claim mode) are refused.
	Tx interface {
		lockproto.Querier
		ledger.Querier
	}
	// NoCheck skips the server check: the caller's transaction cannot run
	// it and the primary's pool is out of reach.
	NoCheck bool
	// NeedSQLTx asks BeginLocked for a *sql.Tx (BEGIN through
	// database/sql, then the lock) rather than the one-message path.
	NeedSQLTx bool
	// SplitTx, when set, begins fn's transaction of the split protocol
	// (see lockproto.Op.SplitTx).
	SplitTx func(ctx context.Context, db *sql.DB, opts *sql.TxOptions) (lockproto.Tx, error)
	// LockConns, when set, is the pool the call's *sql.DB stands over, as
	// a pool of lock connections (lockproto.Op.LockConns: pgxlock's, by
	// internal/pgxdriver): the protocol pins the lock connection of
	// Transaction, Session and Lead from it where the lock travels in one
	// message, and the paths that need database/sql (RunOnce's ledger,
	// the split protocol, fencing, the other verbs) use DB or Lazy.
	LockConns lockproto.LockConnPool
	// Lazy, when set, stands for DB, which is then nil: it opens the
	// *sql.DB on first use, if the call needs it at all (pgxlock's,
	// whose lock connection comes from LockConns), and closes it when the
	// verb returns.
	Lazy lockproto.LazyDB
	// Close, when set, is called when the verb returns (pgxlock closes
	// the call's *sql.DB).
	Close func()
	// Mend, when set, is applied to every error the verb returns after the
	// binding (pgxlock names a server that speaks another protocol).
	Mend func(error) error
}

// A Binder finds the [Pool] behind an adapter's handle for one call of
// verb with opts. Nil names the handle's type when the handle is nil (step
// 2 of the precedence) and returns "" otherwise; Bind's error is the
// handle's own (step 4), and the options' error stays in Pool.Cfg.Err()
// for the core to return in its turn. Bind is called only once the
// arguments are valid; it sends nothing to the server unless the dialect
// cannot be told otherwise (sqllock's unknown drivers, entlock's request
// to the client for its Driver, which sends nothing either).
type Binder interface {
	Nil() string
	Bind(ctx context.Context, verb string, opts []config.Option) (Pool, error)
}

// NilIf returns what when isNil and "" otherwise: a Binder's Nil.
func NilIf(isNil bool, what string) string {
	if isNil {
		return what
	}
	return ""
}

// Args is what a verb checks of its own arguments (step 3).
type Args struct {
	// NilFn reports that fn is nil.
	NilFn bool
	// Err is the first error of the other arguments, if any.
	Err error
}

// Open runs steps 1 to 5 of the precedence for one call of verb and
// returns the pool. On error the pool is released already.
func Open[B Binder](ctx context.Context, b B, pkg, verb string, opts []config.Option, a Args) (Pool, error) {
	if err := CheckHandle(ctx, pkg, verb, b.Nil(), a); err != nil {
		return Pool{}, err
	}
	p, err := b.Bind(ctx, verb, opts)
	if err != nil {
		return Pool{}, err
	}
	if err := p.Cfg.Err(); err != nil {
		p.release()
		return Pool{}, err
	}
	return p, nil
}

// CheckHandle is steps 1 to 3: a nil context, a nil handle (nilHandle
// names its type, "" when it is set), an invalid argument.
func CheckHandle(ctx context.Context, pkg, verb, nilHandle string, a Args) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("%w: %s.%s: nil context", errs.ErrInvalidArgument, pkg, verb)
	case nilHandle != "":
		return fmt.Errorf("%w: %s.%s: nil %s", errs.ErrInvalidArgument, pkg, verb, nilHandle)
	case a.NilFn:
		return fmt.Errorf("%w: %s.%s: nil fn", errs.ErrInvalidArgument, pkg, verb)
	}
	return a.Err
}

// Prepare is Open, then steps 6 to 8 for the lock of verb on k, held as h
// declares: the Op is built (a bad key fails here), an ended context
// returns (lock: the verb takes the lock for its caller), and the server
// is checked. When only the server check failed, the Op is returned with
// its error, so that Lead can retry a connection error; the pool is
// released on every other error.
func Prepare[B Binder](ctx context.Context, b B, pkg, verb string, k keys.Key, opts []config.Option, a Args, lock bool, h lockproto.Holding) (Pool, *lockproto.Op, error) {
	p, err := Open(ctx, b, pkg, verb, opts, a)
	if err != nil {
		return Pool{}, nil, err
	}
	op, err := p.Op(ctx, verb, k, p.Cfg, lock, h)
	if err != nil && op == nil {
		p.release()
		return Pool{}, nil, err
	}
	return p, op, err
}

// Op is steps 6 to 8 on an open pool: the Op of verb on k with cfg, held
// as h declares, the ended-context check and the server check (whose
// failure returns the Op with the error).
func (p Pool) Op(ctx context.Context, verb string, k keys.Key, cfg config.Config, lock bool, h lockproto.Holding) (*lockproto.Op, error) {
	op, err := lockproto.NewOpHeld(p.Dialect, verb, k, cfg, h)
	if err != nil {
		return nil, err
	}
	op.NeedSQLTx = p.NeedSQLTx
	op.SplitTx = p.SplitTx
	op.LockConns, op.LazyDB = p.LockConns, p.Lazy // Lead's terms take them over
	if lock {
		err = op.EndedLock(ctx)
	} else {
		err = lockproto.Ended(ctx)
	}
	if err != nil {
		return nil, err
	}
	if p.NoCheck {
		return op, nil
	}
	if err := op.CheckServerOn(ctx, p.cacheKey(), p.checkQuerier()); err != nil {
		return op, err // the Op is valid; Lead retries a connection error
	}
	return op, nil
}

// CheckPool is steps 7 and 8 for the verbs that build no Op (Runs, Prune,
// AdvanceFences): the ended-context check, then the server check.
func (p Pool) CheckPool(ctx context.Context) error {
	if err := lockproto.Ended(ctx); err != nil {
		return err
	}
	if p.NoCheck {
		return nil
	}
	return lockproto.CheckPool(ctx, p.Dialect, p.cacheKey(), p.checkQuerier())
}

func (p Pool) cacheKey() *sql.DB {
	if p.CacheKey != nil {
		return p.CacheKey
	}
	return p.DB
}

func (p Pool) checkQuerier() lockproto.CheckQuerier {
	if p.Tx != nil {
		if q, ok := p.Tx.(lockproto.CheckQuerier); ok {
			return q
		}
	}
	if p.DB == nil && p.Lazy != nil {
		return p.Lazy
	}
	return p.DB
}

// sqlDB is the primary's *sql.DB: DB, or Lazy's, opened now.
func (p Pool) sqlDB() *sql.DB {
	if p.DB == nil && p.Lazy != nil {
		return p.Lazy.DB()
	}
	return p.DB
}

// reader is where the ledger reads run: the caller's transaction, or the
// primary.
func (p Pool) reader() interface {
	lockproto.Querier
	ledger.Querier
} {
	if p.Tx != nil {
		return p.Tx
	}
	return p.sqlDB()
}

func (p Pool) release() {
	if p.Close != nil {
		p.Close()
	}
	if p.Lazy != nil {
		p.Lazy.Close()
	}
}

// mend applies Pool.Mend to every error a verb returns after binding.
func (p Pool) mend(err error) error {
	if p.Mend != nil {
		return p.Mend(err)
	}
	return err
}

// ownTx refuses a verb that commits on its own when the handle is inside
// the caller's transaction.
func (p Pool) ownTx(verb, why string) error {
	if p.Tx != nil {
		return fmt.Errorf("%w: %s.%s: db is inside a transaction; %s", errs.ErrInvalidArgument, p.Pkg, verb, why)
	}
	return nil
}

// Locked is fn's side of sqllock's and pgxlock's Transaction: it calls
// fn, of type F, with ctx (carrying the fencing token) and the adapter's
// form of lt, the transaction begun with the lock held. It is a function
// of the adapter's, fn its argument, so that no closure is made per call.
type Locked[F any] func(ctx context.Context, fn F, lt *lockproto.LockedTx) error

// TransactionOf runs fn (d.Call) in a transaction begun with the lock of k
// held, commits when fn returns nil and rolls back otherwise (a panic
// included), then releases the lock: every adapter's Transaction.
func TransactionOf[TTx any, D Driver[TTx]](ctx context.Context, d D, pkg string, k keys.Key, nilFn bool, opts []config.Option) error {
	p, op, err := Prepare(ctx, d, pkg, "Transaction", k, opts, Args{NilFn: nilFn}, true, lockproto.HeldForTx)
	defer p.release()
	if err != nil {
		return p.mend(err)
	}
	return op.Use(ctx, func(ctx context.Context) error { return p.mend(inLockTx[TTx](ctx, d, p, op, nil)) })
}

// inLockTx runs fn in its transaction, begun with op's lock held and ended
// when fn returns, or, when the handle is inside the caller's transaction
// and d can nest, in that one (Nester); r, when set, is RunOnce's ledger
// run, whose row is written in the same transaction around fn.
func inLockTx[TTx any, D Driver[TTx]](ctx context.Context, d D, p Pool, op *lockproto.Op, r *ledger.Run) error {
	if p.Tx != nil {
		if n, ok := any(d).(Nester[TTx]); ok {
			return nested(ctx, d, n, p, op, r)
		}
	}
	// db nil: the lock connection comes from the pool's own (its LockConns
	// where the lock travels in one message: lockproto.Op.BeginLocked);
	// RunOnce's ledger statements run in fn's transaction through
	// database/sql, on a connection of the *sql.DB
	db := p.DB
	if r != nil {
		db = p.sqlDB()
	}
	lt, err := op.BeginLocked(ctx, db, op.Cfg.TxOptions)
	if err != nil {
		return err
	}
	tctx := op.TokenContext(ctx)
	tx, end, err := d.Locked(tctx, op, lt)
	if err != nil {
		_ = lt.Rollback()
		return err
	}
	return lockproto.RunTx(ctx, end, p.Pkg+"."+op.Verb, func() error { return call[TTx](ctx, tctx, d, tx, r, lt.Tx) })
}

// call calls fn with tx for tctx, inside r's ledger statements on q when r
// is set.
func call[TTx any, D Driver[TTx]](ctx, tctx context.Context, d D, tx TTx, r *ledger.Run, q lockproto.Querier) error {
	if r == nil {
		return d.Call(tctx, tx)
	}
	return r.InTx(ctx, q, func() error { return d.Call(tctx, tx) })
}

// Transaction is TransactionOf for fn in its Locked form: sqllock's and
// pgxlock's Transaction.
func Transaction[B Binder, F any](ctx context.Context, b B, pkg string, k keys.Key, fn F, locked Locked[F], nilFn bool, opts []config.Option) error {
	return TransactionOf[lockedCall](ctx, lockedDriver[B, F]{b: b, fn: fn, locked: locked}, pkg, k, nilFn, opts)
}

// Lock takes the lock of k in the caller's open transaction, the Pool's
// Tx (sqllock's and pgxlock's Lock), where it stays until that
// transaction ends: the options it cannot honour there are refused (step
// 5), the transaction is checked (lockproto.Op.CheckNested: the server,
// which the Binder could not reach on its own, and the isolation), then
// the lock is taken in a savepoint (lockproto.Op.LockNested).
func Lock[B Binder](ctx context.Context, b B, pkg string, k keys.Key, opts []config.Option) error {
	p, err := Open(ctx, b, pkg, "Lock", opts, Args{})
	defer p.release()
	if err == nil {
		err = lockOptions(pkg, p.Cfg)
	}
	var op *lockproto.Op
	if err == nil {
		op, err = p.Op(ctx, "Lock", k, p.Cfg, true, lockproto.HeldForTx)
	}
	if err == nil {
		err = op.CheckNested(ctx, p.Tx, pkg+".Lock")
	}
	if err != nil {
		return p.mend(err)
	}
	return op.Use(ctx, func(ctx context.Context) error { return p.mend(op.LockNested(ctx, p.Tx)) })
}

// lockOptions refuses the options Lock cannot honour inside the caller's
// transaction.
func lockOptions(pkg string, c config.Config) error {
	var why string
	switch {
	case c.Fencing:
		why = "WithFencing: a fencing token is committed in a transaction of its own before it is handed out, on another connection of the pool, which Lock, given only the caller's transaction, does not have; use Transaction"
	case c.TxOptions != nil:
		why = "WithTxOptions: the transaction is the caller's, begun with the caller's options"
	case c.Claim:
		why = "WithClaim: claim mode is RunOnce's"
	case c.CatchUpWindow > 0:
		why = "WithCatchUp: catching up is RunScheduled's"
	default:
		return nil
	}
	return fmt.Errorf("%w: %s.Lock: %s", errs.ErrInvalidArgument, pkg, why)
}

// Session holds the lock of k on a connection of its own while fn runs.
func Session[B Binder](ctx context.Context, b B, pkg string, k keys.Key, fn func(ctx context.Context) error, opts []config.Option) error {
	p, op, err := Prepare(ctx, b, pkg, "Session", k, opts, Args{NilFn: fn == nil}, true, lockproto.HeldForSession)
	defer p.release()
	if err != nil {
		return p.mend(err)
	}
	return op.Use(ctx, func(ctx context.Context) error { return p.mend(op.Session(ctx, p.DB, fn)) })
}

// Lead campaigns for k and runs fn while elected (lockproto.Op.Lead, which
// asks the server about its locks again at every term). A connection error
// of the first such check is left to the campaign's retries; an invalid
// key or option, an ended context, or any other permanent error is
// returned at once.
func Lead[B Binder](ctx context.Context, b B, pkg string, k keys.Key, fn func(ctx context.Context) error, opts []config.Option) error {
	p, op, err := Prepare(ctx, b, pkg, "Lead", k, opts, Args{NilFn: fn == nil}, true, lockproto.HeldForLead)
	defer p.release()
	if err != nil && (op == nil || lockproto.Permanent(err)) {
		return p.mend(err)
	}
	return op.Use(ctx, func(ctx context.Context) error {
		return p.mend(op.Campaign(ctx, func(ctx context.Context, term *lockproto.Op, fn func(ctx context.Context) error) error {
			// each term asks again, under the pool's cache key: once per
			// pool for a server that passes
			if !p.NoCheck {
				if err := term.CheckServerOn(ctx, p.cacheKey(), p.checkQuerier()); err != nil {
					return err
				}
			}
			return term.Session(ctx, p.DB, fn)
		}, fn))
	})
}

// Claimed runs fn for a claimed run of RunOnce's claim mode, outside the
// ledger's transaction, with the lock session's ctx (carrying the slot),
// and with cfg, the call's settings (WithTxOptions, ClaimNoTx).
type Claimed func(ctx context.Context, p Pool) error

// RunOnce is RunOnceOf for fn in its Locked form, and in claim mode its
// Claimed form: sqllock's and pgxlock's RunOnce.
func RunOnce[B Binder, F any](ctx context.Context, b B, pkg, job string, slot time.Time, fn F, locked Locked[F], claimed Claimed, nilFn bool, opts []config.Option) error {
	return RunOnceOf[lockedCall](ctx, lockedDriver[B, F]{b: b, fn: fn, locked: locked, claimed: claimed}, pkg, job, slot, nilFn, opts)
}

// Run is steps 6 to 8 of RunOnce on an open pool and its ledger run: the
// claim mode is refused inside the caller's transaction, and the lock of
// (job, slot) is prepared.
func (p Pool) Run(ctx context.Context, job string, slot time.Time) (*ledger.Run, *lockproto.Op, error) {
	verb := p.Pkg + ".RunOnce"
	if p.Cfg.Claim && p.Tx != nil {
		return nil, nil, fmt.Errorf("%w: %s: WithClaim with a db inside a transaction: claim mode commits its ledger rows itself and runs fn outside any transaction", errs.ErrInvalidArgument, verb)
	}
	h := lockproto.HeldForTx
	if p.Cfg.Claim { // held for the run, outside fn's transaction
		h = lockproto.HeldForSession
	}
	op, err := p.Op(ctx, "RunOnce", keys.RunKey(job, slot), p.Cfg, true, h)
	if err != nil {
		return nil, nil, err
	}
	r, err := ledger.NewRun(verb, op, job, slot)
	if err != nil {
		return nil, nil, err
	}
	return r, op, nil
}

// RunScheduled runs once (the adapter's RunOnce on the same handle) for
// the slot of schedule at the current time, and first, with
// ormlock.WithCatchUp, for the missed slots before it (ledger.Scheduled).
func RunScheduled[B Binder](ctx context.Context, b B, pkg, job string, schedule sched.Slotter, nilFn bool, opts []config.Option, once func(slot time.Time) error) error {
	var a Args
	if schedule == nil {
		a.Err = fmt.Errorf("%w: %s.RunScheduled: nil schedule", errs.ErrInvalidArgument, pkg)
	}
	a.NilFn = nilFn
	p, err := Open(ctx, b, pkg, "RunScheduled", opts, a)
	defer p.release() // each run opens its own pool too
	if err != nil {
		return err
	}
	return ledger.Scheduled(ctx, pkg+".RunScheduled", job, schedule, func() (ledger.Reader, error) {
		t, err := ledger.NewTable(p.Dialect, p.Cfg.LedgerTable)
		if err != nil {
			return ledger.Reader{}, err
		}
		return ledger.Reader{Cfg: p.Cfg, T: t, Q: p.reader()}, nil
	}, once)
}

// Migrate creates or upgrades the ledger and fence tables, under the
// migration lock.
func Migrate[B Binder](ctx context.Context, b B, pkg string, opts []config.Option) error {
	p, err := Open(ctx, b, pkg, "Migrate", opts, Args{})
	defer p.release()
	if err != nil {
		return err
	}
	cfg := p.Cfg
	cfg.Wait, cfg.Namespace = max(cfg.Wait, ledger.MigrateWait), ""
	op, err := p.Op(ctx, "Migrate", ledger.MigrateKey(cfg.LedgerTable), cfg, false, lockproto.HeldForTx)
	if err != nil {
		return p.mend(err)
	}
	return p.mend(ledger.Migrate(ctx, p.sqlDB(), op))
}

// Holder asks the server who holds k (Shared(k): as for k).
func Holder[B Binder](ctx context.Context, b B, pkg string, k keys.Key, opts []config.Option) (lockproto.HolderInfo, error) {
	if keys.IsShared(k) {
		k = keys.Plain(k)
	}
	p, op, err := Prepare(ctx, b, pkg, "Holder", k, opts, Args{}, false, lockproto.HeldForHolder)
	defer p.release()
	if err != nil {
		return lockproto.HolderInfo{}, p.mend(err)
	}
	h, err := lockproto.LookupHolder(ctx, p.reader(), op)
	return h, p.mend(err)
}

// Holders asks the server for every holder of k, whatever its shape.
func Holders[B Binder](ctx context.Context, b B, pkg string, k keys.Key, opts []config.Option) ([]lockproto.HolderInfo, error) {
	p, op, err := Prepare(ctx, b, pkg, "Holders", k, opts, Args{}, false, lockproto.HeldForTx)
	defer p.release()
	if err != nil {
		return nil, p.mend(err)
	}
	hs, err := lockproto.LookupHolders(ctx, p.reader(), op)
	return hs, p.mend(err)
}

// Runs reads the last limit runs of job from the ledger, its stale runs
// marked (ledger.Table.MarkStale).
func Runs[B Binder](ctx context.Context, b B, pkg, job string, limit int, opts []config.Option) ([]ledger.Row, error) {
	p, err := Open(ctx, b, pkg, "Runs", opts, Args{Err: ledger.CheckRuns(pkg+".Runs", job, limit)})
	defer p.release()
	if err != nil {
		return nil, err
	}
	t, err := ledger.NewTable(p.Dialect, p.Cfg.LedgerTable)
	if err == nil {
		err = p.CheckPool(ctx)
	}
	if err != nil {
		return nil, p.mend(err)
	}
	rs, err := t.Runs(ctx, p.reader(), p.Cfg.Namespace, job, limit)
	if err == nil {
		// a row that looks stale is read again in a transaction of its
		// own on the pool, or in the caller's transaction (which holds a
		// connection the pool may not have a second of)
		fresh := p.sqlDB()
		if p.Tx != nil {
			fresh = nil
		}
		_, err = t.MarkStale(ctx, p.reader(), fresh, p.Cfg, rs, 0)
	}
	return rs, p.mend(err)
}

// Prune deletes the ledger's finished and stale rows older than olderThan.
func Prune[B Binder](ctx context.Context, b B, pkg string, olderThan time.Duration, opts []config.Option) (int64, error) {
	p, err := Open(ctx, b, pkg, "Prune", opts, Args{Err: ledger.CheckPrune(pkg+".Prune", olderThan)})
	defer p.release()
	if err != nil {
		return 0, err
	}
	var t *ledger.Table
	if err = p.ownTx("Prune", "pruning commits batch by batch"); err == nil {
		err = ledger.CheckCatchUp(pkg+".Prune", olderThan, p.Cfg)
	}
	if err == nil {
		t, err = ledger.NewTable(p.Dialect, p.Cfg.LedgerTable)
	}
	if err == nil {
		err = p.CheckPool(ctx)
	}
	if err != nil {
		return 0, p.mend(err)
	}
	n, err := t.PruneOlderThan(ctx, p.sqlDB(), p.Cfg, olderThan, ledger.PruneBatch)
	return n, p.mend(err)
}

// AdvanceFences moves every fencing counter of the namespace by by.
func AdvanceFences[B Binder](ctx context.Context, b B, pkg string, by int64, opts []config.Option) (int64, error) {
	p, err := Open(ctx, b, pkg, "AdvanceFences", opts, Args{Err: ledger.CheckAdvance(pkg+".AdvanceFences", by)})
	defer p.release()
	if err != nil {
		return 0, err
	}
	if err = p.ownTx("AdvanceFences", "the counters are moved in a transaction of their own"); err == nil {
		// a hot standby or a fake-lock engine is refused as by every verb,
		// not with the server's own read-only error
		err = p.CheckPool(ctx)
	}
	if err != nil {
		return 0, p.mend(err)
	}
	n, err := ledger.AdvanceFences(ctx, p.sqlDB(), p.Dialect, pkg+".AdvanceFences", by, p.Cfg)
	return n, p.mend(err)
}
