// The verbs that hold a lock for fn: Transaction, Lock, Session, Lead.

package verbs

import (
	"context"
	"fmt"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/lockproto"
	_ "github.com/ormlock/ormlock/internal/pgxdriver" // pgx's connections, for every adapter (lockproto.RegisterPgDriver)
)

// form of lt, the transaction begun with the lock held. It is a function
// of the adapter's, fn its argument, so that no closure is made per call.
type Locked[F any] func(ctx context.Context, fn F, lt *lockproto.LockedTx) error

// TransactionOf runs fn (d.Call) in a transaction begun with the lock of k
// held, commits when fn returns nil and rolls back otherwise (a panic
// included), then releases the lock: every adapter's Transaction.
func TransactionOf[TTx any, D Driver[TTx]](ctx context.Context, d D, pkg string, k keys.Key, nilFn bool, opts []config.Option) error {
	p, op, err := Prepare(ctx, d, pkg, "Transaction", k, opts, Args{NilFn: nilFn}, true, lockproto.HeldForTransaction)
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
		n, ok := any(d).(Nester[TTx])
		switch {
		case ok && keys.IsRate(op.Key):
			return nestedRate(ctx, d, n, p, op)
		case keys.IsRate(op.Key):
			return fmt.Errorf("%w: %s.%s of %s: db is inside a transaction; a Rate's token is taken in the transaction Transaction begins for fn, so call it outside the caller's", errs.ErrInvalidArgument, p.Pkg, op.Verb, op.Key.String())
		case ok:
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
// 5), the transaction is checked (lockproto.CheckNested: the server,
// which the Binder could not reach on its own, and the isolation), then
// the lock is taken in a savepoint (lockproto.LockNested).
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
		err = lockproto.CheckNested(ctx, op, p.Tx, pkg+".Lock")
	}
	if err != nil {
		return p.mend(err)
	}
	return op.Use(ctx, func(ctx context.Context) error { return p.mend(lockproto.LockNested(ctx, op, p.Tx)) })
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
// returned at once. Each term polls the key's row of the controls table
// for a resign (ledger.ResignReader, through the primary's pool). With
// WithoutCampaign (config.NoCampaign), once the arguments are checked, it
// follows: it waits for ctx's end and returns its cause.
func Lead[B Binder](ctx context.Context, b B, pkg string, k keys.Key, fn func(ctx context.Context) error, opts []config.Option) error {
	p, op, err := Prepare(ctx, b, pkg, "Lead", k, opts, Args{NilFn: fn == nil, Follows: true}, true, lockproto.HeldForLead)
	defer p.release()
	if err != nil && (op == nil || lockproto.Permanent(err)) {
		return p.mend(err)
	}
	if p.Cfg.NoCampaign {
		return follow(ctx, p.Cfg.FirstTry)
	}
	op.Resign = resignReader(p, op)
	return op.Use(ctx, func(ctx context.Context) error {
		return p.mend(lockproto.Campaign(ctx, op, func(ctx context.Context, term *lockproto.Op, fn func(ctx context.Context) error) error {
			// each term asks again, under the pool's cache key: once per
			// pool for a server that passes
			if !p.NoCheck {
				if err := lockproto.CheckServerOn(ctx, term, p.cacheKey(), p.checkQuerier()); err != nil {
					return err
				}
			}
			return term.Session(ctx, p.DB, fn)
		}, fn))
	})
}

// follow is Lead WithoutCampaign: it never campaigns nor calls fn, and
// returns ctx's cause when ctx ends. Its first attempt, none, has ended
// at once (tried, schedhook.FirstTry).
func follow(ctx context.Context, tried chan struct{}) error {
	if tried != nil {
		close(tried)
	}
	<-ctx.Done()
	return context.Cause(ctx)
}

// resignReader is where op's terms poll for a resign: the key's row of
// the controls table beside the ledger table, read through the primary's
// pool; nil (none looked for) when the handle is inside the caller's
// transaction, whose connection a poll must not use.
func resignReader(p Pool, op *lockproto.Op) lockproto.ResignReader {
	if p.Tx != nil {
		return nil
	}
	if r := ledger.NewResignReader(p.sqlDB(), op); r != nil {
		return r
	}
	return nil
}
