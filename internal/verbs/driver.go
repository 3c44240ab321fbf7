package verbs

import (
	"context"
	"database/sql"
	"time"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/sched"
)

// A Driver is an adapter's binding of the verbs that hand fn a transaction
// of its data layer, TTx (Transaction, and RunOnce in both modes): its
// Binder, then how fn gets TTx, which docs/PROTOCOL.md documents per
// adapter (GORM's session over the transaction, ent's *ent.Tx built
// through its driver, sqllock's *sql.Tx, pgxlock's pgx.Tx; each adapter's
// claim-mode handle). A Driver value is one call's: it holds fn, which
// Call calls. The bodies of the verbs, written once over it, are
// [TransactionOf] and [RunOnceOf]; a capability beyond these methods is an
// optional interface ([Nester]).
type Driver[TTx any] interface {
	Binder
	// Locked returns fn's handle over lt, the transaction begun with op's
	// lock held, for ctx (fn's: it carries the fencing token, and RunOnce's
	// slot), and what ends it when fn returns: lt, or a transaction over lt
	// whose Commit and Rollback end lt. On error the core rolls lt back.
	Locked(ctx context.Context, op *lockproto.Op, lt *lockproto.LockedTx) (TTx, lockproto.Ender, error)
	// Claimed returns fn's handle in RunOnce's claim mode, for ctx (the
	// lock session's, carrying the slot and the token), outside the
	// ledger's transaction, and what ends it when fn returns: nil when fn
	// gets no transaction to end.
	Claimed(ctx context.Context, p Pool, op *lockproto.Op) (TTx, lockproto.Ender, error)
	// Call calls fn with tx, for ctx.
	Call(ctx context.Context, tx TTx) error
}

// A Nester is a [Driver] whose handle may be inside the caller's open
// transaction (Pool.Tx: gormlock's call on a *gorm.DB in db.Transaction):
// the lock is then taken in that transaction by the nested protocol
// (nested), and fn runs in it.
type Nester[TTx any] interface {
	// Nest says whether the lock and fn go in a savepoint of that
	// transaction (GORM's DisableNestedTransaction: no), or refuses the
	// nested call (on MySQL/MariaDB a named lock would outlive the
	// transaction).
	Nest(op *lockproto.Op) (savepoint bool, err error)
	// InCallerTx returns fn's handle in the caller's transaction, for ctx.
	InCallerTx(ctx context.Context) TTx
	// TokenDB returns the pool where a fencing token is committed, in a
	// transaction of its own: the primary's, under the caller's.
	TokenDB() (*sql.DB, error)
}

// nested is inLockTx in the caller's open transaction p.Tx, which n's
// handle is inside: after the nested protocol's check
// (lockproto.CheckNested, which sqllock's and pgxlock's Lock make too:
// above READ COMMITTED that transaction's snapshot predates the lock, so
// fn could not see what the lock's earlier holders committed), the lock
// is taken, its token issued, and fn run, in a savepoint of that
// transaction (lockproto.InSavepoint, rolled back to even when the
// context has ended) unless n says otherwise. The lock is the
// transaction's: it is held until the transaction ends.
func nested[TTx any, D Driver[TTx]](ctx context.Context, d D, n Nester[TTx], p Pool, op *lockproto.Op, r *ledger.Run) error {
	savepoint, err := n.Nest(op)
	if err != nil {
		return err
	}
	q := lockproto.Querier(p.Tx)
	if err := lockproto.CheckNested(ctx, op, q, p.Pkg+"."+op.Verb); err != nil {
		return err
	}
	if p.DB != nil { // the primary's pool, under the caller's transaction
		if err := lockproto.CheckFence(op, p.DB); err != nil {
			return err
		}
	}
	defer op.EndXact(ctx)
	body := func() error {
		if err := op.AcquireXact(ctx, q); err != nil {
			return err
		}
		if err := issueToken(ctx, n, op); err != nil {
			return err
		}
		tctx := op.TokenContext(ctx)
		return call[TTx](ctx, tctx, d, n.InCallerTx(tctx), r, q)
	}
	if !savepoint {
		return body()
	}
	return lockproto.InSavepoint(ctx, op, q, body)
}

// issueToken issues the fencing token of a lock taken in the caller's
// transaction: committed on another connection of the primary's pool, as
// for a top-level Transaction on PostgreSQL.
func issueToken[TTx any](ctx context.Context, n Nester[TTx], op *lockproto.Op) error {
	if !op.Cfg.Fencing {
		return nil
	}
	db, err := n.TokenDB()
	if err != nil {
		return err
	}
	return lockproto.IssueToken(ctx, op, db)
}

// RunOnceOf runs fn (d.Call) at most once per (job, slot): every adapter's
// RunOnce. In the ledger's default mode fn runs in the transaction that
// holds the lock and writes the ledger row; in claim mode
// (ormlock.WithClaim) with the handle of d.Claimed, outside that
// transaction, while the lock is held for the run.
func RunOnceOf[TTx any, D Driver[TTx]](ctx context.Context, d D, pkg, job string, slot time.Time, nilFn bool, opts []config.Option) error {
	p, err := Open(ctx, d, pkg, "RunOnce", opts, Args{NilFn: nilFn, Err: ledger.CheckRunOnce(pkg+".RunOnce", false, job, slot)})
	defer p.release()
	if err != nil {
		return err
	}
	r, op, err := p.Run(ctx, job, slot)
	if err != nil {
		return p.mend(err)
	}
	// fn reads the slot with ormlock.Slot
	return op.Use(sched.WithSlot(ctx, keys.NormalizeSlot(slot)), func(ctx context.Context) error {
		if p.Cfg.Claim {
			return p.mend(r.Claimed(ctx, p.sqlDB(), func(ctx context.Context) error { return claimed[TTx](ctx, d, p, op) }))
		}
		// a paused job's slot is recorded skipped once fn's transaction
		// is over (ledger.Run.Settle), in the caller's when it is inside one
		var in lockproto.Querier
		if p.Tx != nil {
			in = p.Tx
		}
		return p.mend(r.Settle(ctx, p.sqlDB(), in, inLockTx[TTx](ctx, d, p, op, r)))
	})
}

// claimed runs fn for a claimed run, with the handle of d.Claimed, ended
// when fn returns.
func claimed[TTx any, D Driver[TTx]](ctx context.Context, d D, p Pool, op *lockproto.Op) error {
	tx, end, err := d.Claimed(ctx, p, op)
	if err != nil {
		return err
	}
	if end == nil {
		return d.Call(ctx, tx)
	}
	return lockproto.RunTx(ctx, end, p.Pkg+".RunOnce", func() error { return d.Call(ctx, tx) })
}

// lockedDriver is the Driver of sqllock's and pgxlock's fn, F, with the
// Locked and Claimed functions that make its handle from the locked
// transaction or, in claim mode, from the pool.
type lockedDriver[B Binder, F any] struct {
	b       B
	fn      F
	locked  Locked[F]
	claimed Claimed
}

// lockedCall is a handle of lockedDriver: the *lockproto.LockedTx, or in
// claim mode the *Pool; one pointer, which the verb's body keeps without
// an allocation.
type lockedCall = any

func (d lockedDriver[B, F]) Nil() string { return d.b.Nil() }

func (d lockedDriver[B, F]) Bind(ctx context.Context, verb string, opts []config.Option) (Pool, error) {
	return d.b.Bind(ctx, verb, opts)
}

func (d lockedDriver[B, F]) Locked(_ context.Context, _ *lockproto.Op, lt *lockproto.LockedTx) (lockedCall, lockproto.Ender, error) {
	return lt, lt, nil
}

func (d lockedDriver[B, F]) Claimed(_ context.Context, p Pool, _ *lockproto.Op) (lockedCall, lockproto.Ender, error) {
	return &p, nil, nil
}

func (d lockedDriver[B, F]) Call(ctx context.Context, c lockedCall) error {
	if lt, ok := c.(*lockproto.LockedTx); ok {
		return d.locked(ctx, d.fn, lt)
	}
	return d.claimed(ctx, *c.(*Pool))
}
