package lockproto

import (
	"context"
	"database/sql"
	"errors"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
)

// MySQL/MariaDB: the named lock (GET_LOCK) on a pinned connection, and a
// Transaction's transaction on that same connection.

// beginLocked is BeginLocked on MySQL/MariaDB: GET_LOCK on a pinned
// connection, then fn's transaction on it.
func (mysqlNamed) beginLocked(ctx context.Context, o *Op, db *sql.DB, opts *sql.TxOptions) (*LockedTx, error) {
	conn, err := mysqlMech.lockOn(ctx, o, sqlDB(o, db))
	if err != nil {
		return nil, err
	}
	if err := mysqlMech.keepCompletionType(ctx, o, conn); err != nil {
		_ = mysqlMech.releaseOn(ctx, o, conn)
		return nil, err
	}
	if err := IssueToken(ctx, o, conn); err != nil { // fencing: committed before BEGIN
		_ = mysqlMech.releaseOn(ctx, o, conn)
		return nil, err
	}
	txCtx, txCancel := txContext(ctx)
	stop := bound(ctx, txCancel)
	tx, err := conn.BeginTx(txCtx, opts)
	if stopped := stop(); err == nil && !stopped {
		err = ctx.Err()
	}
	if err != nil {
		txCancel()
		// a BEGIN cut short leaves the connection's state unknown:
		// releaseOn destroys it when the release is not confirmed
		rerr := mysqlMech.releaseOn(ctx, o, conn)
		if cerr := ctxErr(ctx); cerr != nil && !errors.Is(err, cerr) {
			err = errs.Join(cerr, err)
		}
		if connGone(rerr) && !isCtxErr(rerr) {
			// the lock's connection broke, or the driver closed it as the
			// context ended during BEGIN: the lock went with it (fn did
			// not run)
			return nil, errs.Mark(errs.ErrLockLost, err, "%s on %q: begin transaction", o.Verb, o.Key.String())
		}
		return nil, errs.Wrap(err, "begin transaction")
	}
	o.mysqlTx = &LockedTx{Tx: tx, ctx: ctx, op: o, conn: conn, txCancel: txCancel, named: true}
	return o.mysqlTx, nil
}

// WithNamed runs body on a connection pinned from db while it holds the
// MySQL/MariaDB named lock: GET_LOCK on the connection, body (which opens,
// commits or rolls back its transaction on that same connection), then
// RELEASE_LOCK after body returns, on every path, panics included, with a
// context that ignores the caller's cancellation. When the release fails or
// does not return 1 the connection is destroyed, so the server frees the lock
// and no connection holding a lock goes back to the pool.
func (o *Op) WithNamed(ctx context.Context, db *sql.DB, body func(conn *sql.Conn) error) error {
	conn, err := mysqlMech.lockOn(ctx, o, db)
	if err != nil {
		return err
	}
	defer mysqlMech.releaseOn(ctx, o, conn)
	return body(conn)
}

// lockOn is the first half of WithNamed, for callers whose body does not
// fit in one function call (entlock hands the transaction to ent and releases
// when ent commits or rolls back): it pins a connection from db and takes the
// named lock on it. On success the caller owns conn and must call
// releaseOn exactly once, on every path; on failure the connection has
// already been given back or destroyed.
func (mysqlNamed) lockOn(ctx context.Context, o *Op, db *sql.DB) (*sql.Conn, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, failed(ctx, o, errs.Wrap(err, "pin a connection"))
	}
	o.cancel = mysqlMech.canceller(ctx, o, db, conn) // a cancellation asks the server (stmtCtx)
	err = mysqlMech.acquire(ctx, o, conn)
	o.cancel = nil
	if err != nil {
		dropUnlocked(conn, err)
		return nil, err
	}
	return conn, nil
}

// dropUnlocked gives back a connection on which no lock was taken: to the
// pool after a clean "held elsewhere", destroyed after any error, since its
// state (a GET_LOCK still running server-side, a broken link) is unknown.
func dropUnlocked(conn *sql.Conn, err error) {
	if errors.Is(err, errs.ErrNotAcquired) && !isCtxErr(err) {
		_ = conn.Close()
		return
	}
	Destroy(conn)
}

// releaseOn is the second half of WithNamed: it releases the named lock
// taken by lockOn with a context that ignores ctx's cancellation, then
// returns conn to the pool, or destroys it when the release failed or was not
// confirmed (the error says why; the lock is freed with the connection).
func (mysqlNamed) releaseOn(ctx context.Context, o *Op, conn *sql.Conn) error {
	rctx, cancel := txReleaseCtx(ctx)
	defer cancel()
	if err := withinGrace(ctx, cancel, func() error {
		if err := mysqlMech.release(rctx, o, conn); err != nil {
			return err
		}
		return mysqlMech.restoreCompletionType(rctx, o, conn)
	}); err != nil {
		Destroy(conn)
		o.Emit(ctx, config.EventReleaseFailed, err)
		return err
	}
	_ = conn.Close()
	o.Emit(ctx, config.EventReleased, nil)
	return nil
}

// keepCompletionType makes COMMIT and ROLLBACK on the lock connection conn
// plain for a Transaction: completion_type 1 (CHAIN) would begin a new
// transaction that goes back to the pool with the connection, 2 (RELEASE)
// would end the session, and its lock, before RELEASE_LOCK, and fail the
// second COMMIT of a committed transaction. GET_LOCK's statement read the
// setting; only a session where it is not 0 pays this round trip, and
// another after the release to set it back (restoreCompletionType).
func (mysqlNamed) keepCompletionType(ctx context.Context, o *Op, conn *sql.Conn) error {
	if ct := o.my.completionType; ct == "" || ct == "NO_CHAIN" || ct == "0" {
		return nil
	}
	if _, err := conn.ExecContext(ctx, "SET SESSION completion_type = 0"); err != nil {
		return errs.Wrap(err, "%s on %q: SET SESSION completion_type = 0", o.Verb, o.Key.String())
	}
	o.my.restoreCT = true
	return nil
}

// restoreCompletionType sets completion_type back after the release, when
// keepCompletionType changed it.
func (mysqlNamed) restoreCompletionType(ctx context.Context, o *Op, conn *sql.Conn) error {
	if !o.my.restoreCT {
		return nil
	}
	if _, err := conn.ExecContext(ctx, "SET SESSION completion_type = "+mysqlCompletionType(o.my.completionType)); err != nil {
		return errs.Wrap(err, "restore completion_type")
	}
	o.my.restoreCT = false
	return nil
}

// mysqlCompletionType returns the setting ct as a literal for SET: one of
// its three names, else NO_CHAIN (the default).
func mysqlCompletionType(ct string) string {
	switch ct {
	case "CHAIN", "RELEASE", "1", "2":
		return "'" + ct + "'"
	}
	return "'NO_CHAIN'"
}
