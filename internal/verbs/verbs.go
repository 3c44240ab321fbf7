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

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/lockproto"
	_ "github.com/ormlock/ormlock/internal/pgxdriver" // pgx's connections, for every adapter (lockproto.RegisterPgDriver)
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
	// Follows says that the verb takes WithoutCampaign (Lead, which then
	// follows); every other verb refuses it.
	Follows bool
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
	if p.Cfg.NoCampaign && !a.Follows {
		p.release()
		return Pool{}, fmt.Errorf("%w: %s.%s: WithoutCampaign is Lead's alone (a follower that never campaigns)", errs.ErrInvalidArgument, pkg, verb)
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
		err = lockproto.EndedLock(ctx, op)
	} else {
		err = lockproto.Ended(ctx)
	}
	if err != nil {
		return nil, err
	}
	if p.NoCheck {
		return op, nil
	}
	if err := lockproto.CheckServerOn(ctx, op, p.cacheKey(), p.checkQuerier()); err != nil {
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
