package lockproto

import (
	"context"
	"database/sql"
	"errors"
	"sync"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
)

// The locked transaction that a Transaction hands to its adapter: BeginLocked
// picks the protocol (xact.go, split.go, pinned.go), and Commit and Rollback
// end the transaction, then the lock.

// LockedTx is fn's transaction (Tx) together with the lock it was begun
// under, for adapters that hand an open transaction to their ORM instead of
// running a callback inside the ORM's own transaction helper (entlock gives
// it to ent as a dialect.Tx, gormlock to GORM as a session's ConnPool).
// Commit and Rollback end the transaction and then the lock, once, on every
// path: on PostgreSQL the end of the transaction that holds the xact lock
// releases it; on MySQL/MariaDB RELEASE_LOCK runs after COMMIT or ROLLBACK
// on the same pinned connection, which is destroyed if the release fails or
// is not confirmed.
//
// The transaction carries ctx's values but not its cancellation while the
// caller's fn runs, so that the lock is held until the caller ends the
// transaction (database/sql would roll back a ctx-bound transaction,
// dropping a PostgreSQL lock, while fn may still be running). Every wait of
// the protocol itself is bounded by ctx (the rules: deadline.go).
// Once ctx has ended, Commit rolls back instead and returns ctx's error, as
// database/sql does for a transaction bound to ctx. Either way the caller
// must call Commit or Rollback.
type LockedTx struct {
	// Tx is the transaction, for running statements: a *sql.Tx, or on
	// PostgreSQL with pgx a *OneMessageTx (BEGIN and the lock were one
	// message). End it through LockedTx's Commit or Rollback, never Tx's
	// own.
	Tx Tx

	ctx      context.Context
	op       *Op
	conn     *sql.Conn          // Tx's pinned connection; nil when Tx came from the pool (split)
	txCancel context.CancelFunc // cancels Tx's own context, which bounds BEGIN, COMMIT and ROLLBACK
	lock     *lockOnlyTx        // split protocol: the lock's own READ COMMITTED transaction
	// named: the lock is a named lock held by conn, released after the
	// transaction ends (MySQL/MariaDB), whose COMMIT and ROLLBACK go as
	// statements when ctx can end (mysqlEnd)
	named bool
	once  sync.Once
}

// Tx is the transaction fn's statements run in, as the adapters use it:
// a *sql.Tx, or a *OneMessageTx (BEGIN and the lock in one message). Its
// methods are also GORM's ConnPool and TxCommitter.
type Tx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
	Commit() error
	Rollback() error
}

var (
	_ Tx = (*sql.Tx)(nil)
	_ Tx = (*OneMessageTx)(nil)
)

// BeginLocked takes o's lock and begins a transaction with opts in which the
// caller's fn sees every commit of every earlier holder of the lock:
//
//   - PostgreSQL, READ COMMITTED (the default, and READ UNCOMMITTED, which
//     PostgreSQL runs as READ COMMITTED): on a connection pinned from db,
//     BEGIN, then pg_try_advisory_xact_lock (or the bounded wait) as the
//     transaction's first statement. Each later statement takes a fresh
//     snapshot, so fn sees what earlier holders committed. With pgx both
//     travel in one message and Tx is a *OneMessageTx (see onemsg.go), unless
//     o.NeedSQLTx; other drivers get BEGIN through database/sql, then the
//     lock.
//   - PostgreSQL, REPEATABLE READ and SERIALIZABLE (the split protocol): the
//     transaction's snapshot is taken by its first statement, which would be
//     the lock statement, before the lock is granted. So the lock is taken in
//     a READ COMMITTED transaction of its own on a pinned connection, as
//     Session holds it, and fn's transaction begins on a second connection
//     only once the lock is held; its first statement (fn's) takes the
//     snapshot. Before COMMIT, "SELECT 1" on the lock transaction confirms the
//     lock is still held (if not, fn's transaction is rolled back and the
//     error wraps errs.ErrLockLost); the lock transaction ends after the
//     COMMIT. It needs two connections of db: a db whose MaxOpenConns is 1 is
//     refused with errs.ErrInvalidArgument before anything is taken.
//   - MySQL/MariaDB: GET_LOCK on a pinned connection, then the transaction on
//     that same connection, so any snapshot is taken after the lock.
//
// ctx bounds the wait for a connection, BEGIN and the lock. On failure
// nothing is held and the error wraps errs.ErrNotAcquired when another
// holder has the lock (and ctx's error when ctx ended the wait).
func (o *Op) BeginLocked(ctx context.Context, db *sql.DB, opts *sql.TxOptions) (*LockedTx, error) {
	if o.Cfg.Fencing {
		db = sqlDB(o, db)
		if err := CheckFence(o, db); err != nil {
			return nil, err
		}
	}
	return o.target.mech.beginLocked(ctx, o, db, opts)
}

// beginLocked is BeginLocked on PostgreSQL: the split protocol for a
// snapshot isolation, else the lock inline in fn's transaction.
func (pgAdvisory) beginLocked(ctx context.Context, o *Op, db *sql.DB, opts *sql.TxOptions) (*LockedTx, error) {
	if SnapshotIsolation(opts) {
		return pgMech.beginSplit(ctx, o, sqlDB(o, db), opts)
	}
	return pgMech.beginInline(ctx, o, db, opts) // db may be nil with o.LockConns
}

// SnapshotIsolation reports whether opts ask for an isolation level whose
// snapshot PostgreSQL takes once, at the transaction's first statement:
// REPEATABLE READ, SNAPSHOT, SERIALIZABLE or LINEARIZABLE. LevelDefault is
// taken as READ COMMITTED, the server's default.
func SnapshotIsolation(opts *sql.TxOptions) bool {
	if opts == nil {
		return false
	}
	switch opts.Isolation {
	case sql.LevelRepeatableRead, sql.LevelSnapshot, sql.LevelSerializable, sql.LevelLinearizable:
		return true
	}
	return false
}

// Commit commits the transaction (or rolls it back and returns ctx's error
// when ctx has ended), then releases the lock. A COMMIT still running
// endGrace after ctx ended is cut short: the connection is closed and the
// error matches ctx's error; like any client whose COMMIT is interrupted,
// the caller cannot know whether the server committed.
func (t *LockedTx) Commit() error {
	var err error
	if t.ctx.Err() == nil && t.lock != nil {
		if lerr := t.lock.confirm(t.ctx); lerr != nil && t.ctx.Err() == nil {
			_ = t.rollback()
			t.op.Emit(t.ctx, config.EventLockLost, lerr)
			t.end()
			return errs.Mark(errs.ErrLockLost, lerr, "%q: the lock transaction failed before COMMIT", t.op.Key.String())
		}
	}
	if cerr := t.ctx.Err(); cerr != nil {
		rerr := t.rollback()
		err = cerr
		if connGone(rerr) && !isCtxErr(rerr) {
			err = t.lockLost("ROLLBACK", rerr)
		}
	} else {
		if t.named && t.implicitCommit() {
			t.warnImplicitCommit()
		}
		if ct, before := t.commitBefore(); before != "" {
			err = withinGrace(t.ctx, t.txCancel, func() error { return ct.end(before + "COMMIT") })
		} else if t.named && t.ctx.Done() != nil {
			err = t.mysqlEnd("COMMIT", t.Tx.Commit)
		} else {
			err = withinGrace(t.ctx, t.txCancel, t.Tx.Commit)
		}
		switch {
		case err == nil:
		case t.ctx.Err() != nil:
			err = errs.Mark(errs.ErrCommitUnknown, errs.Join(t.ctx.Err(), err), "%q: COMMIT cut short after the context ended", t.op.Key.String())
		case connGone(err) && unsent(err):
			if t.lock == nil {
				err = t.lockLost("COMMIT (not sent: the transaction did not commit)", err)
			}
		case connGone(err) && t.lock != nil:
			// fn's transaction, on its own connection (the lock was
			// confirmed before COMMIT)
			err = errs.Mark(errs.ErrCommitUnknown, err, "%q: COMMIT", t.op.Key.String())
		case connGone(err):
			err = errs.Mark(errs.ErrCommitUnknown, t.lockLost("COMMIT", err), "")
		}
	}
	t.end()
	return err
}

// mysqlEnd ends a MySQL/MariaDB transaction whose context can end with stmt
// (COMMIT or ROLLBACK). go-sql-driver's Commit and Rollback take no context
// and wait as long as the DSN's readTimeout (by default for ever) on a
// server that stopped answering, so stmt is sent as a statement with a
// context that ends endGrace after t.ctx (the driver closes the connection
// then), and database/sql's transaction is ended afterwards by end (its
// Commit or Rollback), a statement the server, no longer in a transaction,
// answers at once: one round trip more, paid only by a context that can
// end.
func (t *LockedTx) mysqlEnd(stmt string, end func() error) error {
	cctx, cancel := context.WithCancel(context.WithoutCancel(t.ctx))
	defer cancel()
	if err := withinGrace(t.ctx, cancel, func() error {
		_, err := t.Tx.ExecContext(cctx, stmt)
		return err
	}); err != nil {
		_ = t.Tx.Rollback() // ends database/sql's transaction; the connection is closed
		return errs.Wrap(err, "%s", stmt)
	}
	// stmt took effect: the outcome is known whatever end answers (a
	// connection the server closed after it answers with an error, which
	// the release then finds)
	_ = end()
	return nil
}

// rollback ends the transaction with ROLLBACK, cut endGrace after t.ctx
// ended (on MySQL/MariaDB by mysqlEnd).
func (t *LockedTx) rollback() error {
	if t.named && t.ctx.Done() != nil {
		return t.mysqlEnd("ROLLBACK", t.Tx.Rollback)
	}
	return withinGrace(t.ctx, t.txCancel, t.Tx.Rollback)
}

// Token returns the fencing token of the lock (ormlock.WithFencing).
func (t *LockedTx) Token() (int64, bool) { return t.op.Token() }

// Rollback rolls the transaction back, then releases the lock. When the
// ROLLBACK or the release finds the lock's connection gone (it broke, or
// the driver closed it as a statement's context ended), the error wraps
// errs.ErrLockLost: the lock may have been free while fn ran.
//
// On MySQL/MariaDB, a transaction that fn committed implicitly (a DDL
// statement) gives an error wrapping ErrImplicitCommit: the ROLLBACK undid
// nothing written before the DDL.
func (t *LockedTx) Rollback() error {
	implicit := t.implicitCommit()
	err := t.rollback()
	// the split protocol's fn transaction is not the lock's connection:
	// only the lock transaction's end can find the lock gone
	if t.lock == nil && connGone(err) && !(isCtxErr(err) && ctxErr(t.ctx) != nil) {
		t.end()
		return t.lockLost("ROLLBACK", err)
	}
	if rerr := t.end(); connGone(rerr) && !isCtxErr(rerr) {
		return t.lockLost("the release", rerr)
	}
	if implicit {
		return errs.Join(errs.Mark(ErrImplicitCommit, nil, "%s on %q", t.op.Verb, t.op.Key.String()), err)
	}
	return err
}

// end releases the lock after the transaction, once, and returns the
// release's error (nil where the end of the transaction was the release).
func (t *LockedTx) end() (err error) {
	t.once.Do(func() {
		t.txCancel()
		switch {
		case t.named:
			err = mysqlMech.releaseOn(t.ctx, t.op, t.conn)
		case t.lock != nil:
			err = t.lock.end(t.ctx)
		case t.conn != nil:
			_ = t.conn.Close()
		}
		if !t.named {
			// a *OneMessageTx gave its connection back or destroyed it as it ended
			t.op.EndXact(t.ctx)
		}
	})
	return err
}

// Ender is what RunTx ends: a LockedTx, ent's transaction over one, or
// the transaction of RunOnce's claim mode.
type Ender interface {
	Commit() error
	Rollback() error
}

// RunTx calls fn and ends tx, the same in every adapter (ent's WithTx
// habit): commit when fn returns nil (a failure wrapped as "what: commit",
// e.g. "gormlock.Transaction"), rollback when fn fails, panics or calls
// runtime.Goexit. When fn failed with ferr and the rollback returned rerr,
// the result is ferr joined with rerr when rerr says something the caller
// must hear (Reported: the lock was lost, or an implicit commit ferr does
// not mention), so that errors.Is matches both, even when ctx ended;
// otherwise as errs.RolledBack (ferr itself, or ferr with the rollback's
// failure added).
func RunTx(ctx context.Context, tx Ender, what string, fn func() error) error {
	done := false
	defer func() {
		if !done { // fn panicked or called runtime.Goexit
			_ = tx.Rollback()
		}
	}()
	ferr := fn()
	done = true
	if ferr == nil {
		if err := tx.Commit(); err != nil {
			return errs.Wrap(err, "%s: commit", what)
		}
		return nil
	}
	switch rerr := tx.Rollback(); {
	case rerr == nil:
		return ferr
	case Reported(rerr, ferr):
		return errs.Join(rerr, ferr)
	case errors.Is(rerr, ErrImplicitCommit):
		return ferr // which says so already (RunOnce's ledger)
	default:
		return errs.RolledBack(ctx, ferr, rerr)
	}
}
