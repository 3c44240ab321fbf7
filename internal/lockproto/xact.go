package lockproto

import (
	"context"
	"database/sql"
	"errors"

	"github.com/ormlock/ormlock/internal/errs"
)

// The xact protocol: on PostgreSQL at READ COMMITTED, the lock is the first
// statement of the caller's own transaction (with pgx, in one message with
// BEGIN: onemsg.go), and the transaction's end releases it.

// pinXact pins a connection from db, waiting no longer than ctx allows.
func pinXact(ctx context.Context, o *Op, db *sql.DB) (*sql.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, notAcquired(ctx, o, err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, failed(ctx, o, errs.Wrap(err, "pin a connection"))
	}
	return conn, nil
}

// beginInline is the PostgreSQL READ COMMITTED protocol: the lock is the
// first statement of the caller's transaction. Keep it the one place where
// that path is built, and as cheap as it is.
func (pgAdvisory) beginInline(ctx context.Context, o *Op, db *sql.DB, opts *sql.TxOptions) (*LockedTx, error) {
	var (
		lt   *LockedTx
		snap sql.IsolationLevel
	)
	begin, oneMsg := pgBegin(opts)
	oneMsg = oneMsg && o.target.oneMessage()
	native := oneMsg && !o.NeedSQLTx && poolNative(o, db)
	if !native {
		db = sqlDB(o, db)
	}
	conn, err := pinLock(ctx, o, db, native)
	if err != nil {
		return nil, err
	}
	switch {
	case oneMsg && !o.NeedSQLTx && oneMessageOn(conn):
		lt, snap, err = pgMech.beginOneMessage(ctx, o, db, conn, begin)
	case oneMsg && o.NeedSQLTx && wrappedPool(db):
		// a *sql.Tx on a wrapped connector's connection: database/sql's
		// BEGIN carries the lock (sqlbegin.go)
		lt, snap, err = beginArmed(ctx, o, conn.sqlConn(), opts, begin)
	default:
		lt, snap, err = pgMech.beginThenLock(ctx, o, conn.sqlConn(), opts)
	}
	if err != nil {
		return nil, err
	}
	if snap != sql.LevelDefault {
		// No level was asked for, and the server's default takes its
		// snapshot once: the lock statement took it, before the lock, and
		// the transaction (with the lock) was given back. Take the split
		// protocol's path at that level, explicitly.
		split := &sql.TxOptions{Isolation: snap}
		if opts != nil {
			split.ReadOnly = opts.ReadOnly
		}
		return pgMech.beginSplit(ctx, o, sqlDB(o, db), split)
	}
	if o.Cfg.Fencing {
		if err := IssueToken(ctx, o, sqlDB(o, db)); err != nil { // committed on the pool
			_ = lt.Rollback()
			return nil, err
		}
	}
	return lt, nil
}

// beginOneMessage begins the transaction and takes the lock in one message
// on the pgx connection conn (onemsg.go). When the server's default level,
// which BEGIN did not name, takes its snapshot once, the transaction has
// been given back and that level is returned instead (see beginInline).
func (pgAdvisory) beginOneMessage(ctx context.Context, o *Op, db *sql.DB, conn pinned, begin string) (*LockedTx, sql.IsolationLevel, error) {
	ct, _, err := pgMech.lockOneMessage(ctx, o, db, conn, begin, forFn)
	if err != nil {
		return nil, sql.LevelDefault, err
	}
	lt := &LockedTx{Tx: ct, ctx: ctx, op: o, txCancel: ct.cancel}
	if level := ct.snapDefault; level != sql.LevelDefault {
		_ = lt.Rollback()
		if o.then != nil {
			o.then.ran = false // rolled back with the transaction
		}
		return nil, level, nil
	}
	return lt, sql.LevelDefault, nil
}

// beginThenLock begins the transaction through database/sql, then takes
// the lock as its first statement; the snapshot level is returned as
// beginOneMessage does.
func (pgAdvisory) beginThenLock(ctx context.Context, o *Op, conn *sql.Conn, opts *sql.TxOptions) (*LockedTx, sql.IsolationLevel, error) {
	tx, txCancel, err := beginOn(ctx, o, conn, opts)
	if err != nil {
		Destroy(conn)
		return nil, sql.LevelDefault, err
	}
	// No level asked for: the lock's statement reads the server's default,
	// which may take the snapshot once (as the one-message path does).
	var iso *string
	if opts == nil || opts.Isolation == sql.LevelDefault {
		iso = new(string)
	}
	o.cancel = pgCancelOf(conn) // a cancellation asks the server (stmtCtx)
	err = pgMech.acquireXact(ctx, o, tx, iso)
	o.cancel = nil
	if err != nil {
		if errors.Is(err, errSnapshotTaken) {
			// the snapshot predates the lock: give the transaction (and
			// the lock, if it was taken) back
			if withinGrace(ctx, txCancel, tx.Rollback) != nil {
				Destroy(conn)
			} else {
				_ = conn.Close()
			}
			level, _ := snapshotLevel(*iso)
			return nil, level, nil
		}
		if withinGrace(ctx, txCancel, tx.Rollback) != nil || !cleanNotAcquired(err) {
			Destroy(conn)
		} else {
			_ = conn.Close()
		}
		return nil, sql.LevelDefault, err
	}
	return &LockedTx{Tx: tx, ctx: ctx, op: o, conn: conn, txCancel: txCancel}, sql.LevelDefault, nil
}

// beginOn begins a transaction on conn whose context outlives ctx, with the
// BEGIN itself bounded by ctx. A failure has been classified (ctx ended:
// not acquired); the caller disposes of conn.
func beginOn(ctx context.Context, o *Op, conn *sql.Conn, opts *sql.TxOptions) (*sql.Tx, context.CancelFunc, error) {
	txCtx, txCancel := txContext(ctx)
	stop := bound(ctx, txCancel)
	tx, err := conn.BeginTx(txCtx, opts)
	if stopped := stop(); err == nil && !stopped {
		err = ctx.Err() // database/sql is rolling tx back
	}
	if err != nil {
		txCancel()
		return nil, nil, failed(ctx, o, errs.Wrap(err, "begin transaction"))
	}
	return tx, txCancel, nil
}

// cleanNotAcquired reports whether err is a plain "held elsewhere", after
// which the connection is known to be in a clean state.
func cleanNotAcquired(err error) bool {
	return errors.Is(err, errs.ErrNotAcquired) && !isCtxErr(err) && SQLState(err) == ""
}
