package lockproto

import (
	"context"
	"database/sql"
	"sync"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
)

// The verbs that hold a lease: Session (and Lead's terms, which are
// Sessions) and Transaction (BeginLocked). docs/PROTOCOL.md (Leases) says
// what each sends.

// take acquires o's lease on db (sharedDB: pgxlock's *sql.DB that the
// calls on one pool share, so that their leases renew in one batch) and
// issues its token: the epoch of its row.
func (m leaseMech) take(ctx context.Context, o *Op, db *sql.DB) (*leaseHeld, error) {
	db = sharedDB(o, db)
	h, err := newLeaseHeld(o, m, db)
	if err != nil {
		return nil, o.Abandon(ctx, err)
	}
	if err := h.acquire(ctx); err != nil {
		return nil, err
	}
	o.fence.token = h.token()
	// no lock connection: nothing the ledger writes beside a lease waits
	// for a COMMIT of its own (AutocommitOff)
	o.my = mysqlLockConnVars{autocommit: 1}
	return h, nil
}

// session is Session's lease: acquired, renewed in the process's batch
// for its pool (leaserenew.go) while fn runs, expired when fn returns. A
// renewal that finds the row taken, or the lease's own deadline passing
// without a renewal, cancels fn's context with cause errs.ErrLockLost, and
// Session's error wraps it. No connection is held while fn runs.
func (m leaseMech) session(ctx context.Context, o *Op, db *sql.DB, fn func(ctx context.Context) error) (err error) {
	h, err := m.take(ctx, o, db)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(tokenContext(ctx, o))
	kctx := keepaliveContext(ctx, o)
	h.start(func(lerr error) {
		// fn hears of the loss first; then the observer
		cancel(errs.ErrLockLost)
		h.emitLost(kctx, lerr)
	})
	renewing(h)
	defer func() {
		lost := h.stop()
		cancel(context.Canceled)
		if lerr := h.end(ctx, lost); lerr != nil {
			lerr = errs.Mark(errs.ErrLockLost, lerr, "%q", o.Key.String())
			if err != nil {
				err = errs.Join(lerr, err)
			} else {
				err = lerr
			}
		}
	}()
	return fn(fctx)
}

// end expires the lease once renewals stopped (lost: why it was lost, if
// it was) and reports the release; a lease whose release failed expires
// by itself at its TTL, which is no loss. It returns lost.
func (h *leaseHeld) end(ctx context.Context, lost error) error {
	rerr := h.free(ctx, lost != nil)
	switch {
	case rerr != nil:
		h.o.Emit(ctx, config.EventReleaseFailed, rerr)
	case lost == nil:
		h.o.Emit(ctx, config.EventReleased, nil)
	}
	return lost
}

// beginLocked is a Transaction's lease: acquired and committed first, then
// fn's transaction begun on a connection of db (Op.SplitTx's where the
// adapter begins it), renewed while fn runs; before COMMIT, a statement in
// fn's transaction checks and locks the lease's row (leaseTx.beforeCommit),
// and the lease is expired once the transaction ended.
func (m leaseMech) beginLocked(ctx context.Context, o *Op, db *sql.DB, opts *sql.TxOptions) (*LockedTx, error) {
	h, err := m.take(ctx, o, db)
	if err != nil {
		return nil, err
	}
	lt := &leaseTx{h: h, ctx: ctx}
	kctx := keepaliveContext(ctx, o)
	h.start(func(lerr error) { h.emitLost(kctx, lerr) }) // the check before COMMIT fails
	renewing(h)
	txCtx, txCancel := txContext(ctx)
	stop := bound(ctx, txCancel)
	tx, err := beginSplitTx(txCtx, o, h.db, opts)
	if stopped := stop(); err == nil && !stopped {
		err = ctx.Err() // ctx ended as BEGIN returned: database/sql is rolling tx back
		dropSplitTx(o, tx)
	}
	if err != nil {
		txCancel()
		_ = lt.end(ctx)
		o.EndXact(ctx)
		if cerr := ctxErr(ctx); cerr != nil {
			return nil, errs.Wrap(errs.Join(cerr, err), "%s on %q: begin transaction", o.Verb, o.Key.String())
		}
		return nil, errs.Wrap(err, "begin transaction")
	}
	return &LockedTx{Tx: tx, ctx: ctx, op: o, txCancel: txCancel, lock: lt}, nil
}

// leaseTx is a Transaction's lease, as the LockedTx's txLock.
type leaseTx struct {
	h    *leaseHeld
	ctx  context.Context
	once sync.Once
}

// beforeCommit checks the lease in fn's transaction tx (leaseHeld.check):
// a lease lost, by its deadline or on the server, fails it.
func (l *leaseTx) beforeCommit(ctx context.Context, tx Tx) error {
	if !l.h.active() {
		if lost := l.h.stop(); lost != nil {
			return errs.Mark(errs.ErrLockLost, lost, "%q", l.h.o.Key.String())
		}
	}
	return l.h.check(ctx, tx)
}

// end stops the renewals and expires the lease; a failed release is
// reported to the observer (the lease expires by itself) and is not an
// error of the transaction, whose outcome it does not change.
func (l *leaseTx) end(ctx context.Context) error {
	l.once.Do(func() {
		lost := l.h.stop()
		if rerr := l.h.free(ctx, lost != nil); rerr != nil {
			l.h.o.Emit(ctx, config.EventReleaseFailed, rerr)
		}
	})
	return nil
}
