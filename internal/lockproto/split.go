package lockproto

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/ormlock/ormlock/internal/errs"
)

// The split protocol: on PostgreSQL at REPEATABLE READ and SERIALIZABLE,
// the lock is held by a lock-only transaction (lockonlytx.go) and fn's
// transaction begins on a second connection once the lock is held, so that
// its snapshot is taken after the lock.

// beginSplit is the PostgreSQL protocol for REPEATABLE READ and
// SERIALIZABLE (see BeginLocked).
func (pgAdvisory) beginSplit(ctx context.Context, o *Op, db *sql.DB, opts *sql.TxOptions) (*LockedTx, error) {
	if db.Stats().MaxOpenConnections == 1 {
		return nil, fmt.Errorf("%w: %s on %q at isolation %s needs two connections (the lock is held on one, in a READ COMMITTED transaction, so that the transaction on the other takes its snapshot after the lock is granted), and the pool's MaxOpenConns is 1",
			errs.ErrInvalidArgument, o.Verb, o.Key.String(), opts.Isolation)
	}
	conn, err := pinXact(ctx, o, db)
	if err != nil {
		return nil, err
	}
	lk, err := pgMech.beginLockOnly(ctx, o, db, sqlPin{conn}, forSplit)
	if err != nil {
		return nil, err
	}
	if err := IssueToken(ctx, o, db); err != nil { // fencing: committed on the pool
		lk.end(ctx)
		o.EndXact(ctx)
		return nil, err
	}
	// fn's transaction, on a connection of its own: its first statement,
	// fn's, takes the snapshot, after the lock was granted.
	txCtx, txCancel := txContext(ctx)
	stop := bound(ctx, txCancel)
	tx, err := beginSplitTx(txCtx, o, db, opts)
	if stopped := stop(); err == nil && !stopped {
		// ctx ended as BEGIN returned: database/sql is rolling tx back
		err = ctx.Err()
		dropSplitTx(o, tx)
		tx = nil
	}
	if err != nil {
		txCancel()
		lk.end(ctx)
		o.EndXact(ctx)
		if cerr := ctxErr(ctx); cerr != nil {
			return nil, errs.Wrap(errs.Join(cerr, err), "%s on %q: begin transaction", o.Verb, o.Key.String())
		}
		return nil, errs.Wrap(err, "begin transaction")
	}
	return &LockedTx{Tx: tx, ctx: ctx, op: o, txCancel: txCancel, lock: lk}, nil
}

// beginSplitTx begins fn's transaction of the split protocol (beginSplit):
// db.BeginTx, or Op.SplitTx when the adapter needs a hold of the
// transaction's connection (pgxlock hands fn a pgx.Tx on it). A
// transaction that must be given up after a successful begin is rolled
// back by the caller through Tx.Rollback.
func beginSplitTx(ctx context.Context, o *Op, db *sql.DB, opts *sql.TxOptions) (Tx, error) {
	if o.SplitTx != nil {
		return o.SplitTx(ctx, db, opts)
	}
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return tx, nil
}

// dropSplitTx gives up a transaction of Op.SplitTx that database/sql is
// rolling back already (its context ended as BEGIN returned), so that the
// adapter frees what it holds with it (a pinned connection).
func dropSplitTx(o *Op, tx Tx) {
	if o.SplitTx != nil && tx != nil {
		_ = tx.Rollback()
	}
}
