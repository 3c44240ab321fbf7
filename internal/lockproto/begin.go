package lockproto

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/errs"
)

// LockedTx is a transaction begun with the lock held, for adapters that hand
// an open transaction to their ORM instead of running a callback inside the
// ORM's own transaction helper (entlock gives it to ent as a dialect.Tx,
// gormlock to GORM as a session's ConnPool). Commit and Rollback end the
// transaction and then the lock, once, on every path: on PostgreSQL the end
// of the transaction that holds the xact lock releases it; on MySQL/MariaDB
// RELEASE_LOCK runs after COMMIT or ROLLBACK on the same pinned connection,
// which is destroyed if the release fails or is not confirmed.
//
// The transaction carries ctx's values but not its cancellation while the
// caller's fn runs, so that the lock is held until the caller ends the
// transaction (database/sql would roll back a ctx-bound transaction,
// dropping a PostgreSQL lock, while fn may still be running). Every wait of
// the protocol itself is bounded by ctx (see the package doc, Deadlines).
// Once ctx has ended, Commit rolls back instead and returns ctx's error, as
// database/sql does for a transaction bound to ctx. Either way the caller
// must call Commit or Rollback.
type LockedTx struct {
	// Tx is the transaction, for running statements: a *sql.Tx, or on
	// PostgreSQL with pgx a *ConnTx (BEGIN and the lock were one message).
	// End it through LockedTx's Commit or Rollback, never Tx's own.
	Tx TxConn

	ctx      context.Context
	op       *Op
	conn     *sql.Conn          // Tx's pinned connection; nil when Tx came from the pool (split)
	txCancel context.CancelFunc // cancels Tx's own context, which bounds BEGIN, COMMIT and ROLLBACK
	lock     *pgLockTx          // split protocol: the lock's own READ COMMITTED transaction
	once     sync.Once
}

// TxConn is a transaction as the adapters use it: *sql.Tx and *ConnTx have
// these methods, which are also GORM's ConnPool and TxCommitter.
type TxConn interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
	Commit() error
	Rollback() error
}

var (
	_ TxConn = (*sql.Tx)(nil)
	_ TxConn = (*ConnTx)(nil)
)

// BeginLocked takes o's lock and begins a transaction with opts in which the
// caller's fn sees every commit of every earlier holder of the lock:
//
//   - PostgreSQL, READ COMMITTED (the default, and READ UNCOMMITTED, which
//     PostgreSQL runs as READ COMMITTED): on a connection pinned from db,
//     BEGIN, then pg_try_advisory_xact_lock (or the bounded wait) as the
//     transaction's first statement. Each later statement takes a fresh
//     snapshot, so fn sees what earlier holders committed. With pgx both
//     travel in one message and Tx is a *ConnTx (see onemsg.go), unless
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
//     error wraps ormlock.ErrLockLost); the lock transaction ends after the
//     COMMIT. It needs two connections of db: a db whose MaxOpenConns is 1 is
//     refused with ormlock.ErrInvalidArgument before anything is taken.
//   - MySQL/MariaDB: GET_LOCK on a pinned connection, then the transaction on
//     that same connection, so any snapshot is taken after the lock.
//
// ctx bounds the wait for a connection, BEGIN and the lock. On failure
// nothing is held and the error wraps ormlock.ErrNotAcquired when another
// holder has the lock (and ctx's error when ctx ended the wait).
func (o *Op) BeginLocked(ctx context.Context, db *sql.DB, opts *sql.TxOptions) (*LockedTx, error) {
	if err := o.CheckFence(db); err != nil {
		return nil, err
	}
	switch o.Dialect {
	case Postgres:
		if SnapshotIsolation(opts) {
			return o.beginSplit(ctx, db, opts)
		}
		return o.beginInline(ctx, db, opts)
	case MySQL:
		return o.beginMySQL(ctx, db, opts)
	}
	return nil, fmt.Errorf("%w: dialect %d", ormlock.ErrUnsupportedDialect, o.Dialect)
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

// pin pins a connection from db, waiting no longer than ctx allows.
func (o *Op) pin(ctx context.Context, db *sql.DB) (*sql.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, o.notAcquired(ctx, err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, o.failed(ctx, errs.Wrap(err, "pin a connection"))
	}
	return conn, nil
}

// beginInline is the PostgreSQL READ COMMITTED protocol: the lock is the
// first statement of the caller's transaction. Keep it the one place where
// that path is built, and as cheap as it is.
func (o *Op) beginInline(ctx context.Context, db *sql.DB, opts *sql.TxOptions) (*LockedTx, error) {
	conn, err := o.pin(ctx, db)
	if err != nil {
		return nil, err
	}
	if begin, ok := pgBegin(opts); ok && !o.NeedSQLTx && isPgx(conn) {
		ct, _, err := o.lockOneMessage(ctx, db, conn, begin, false, true)
		if err != nil {
			return nil, err
		}
		lt := &LockedTx{Tx: ct, ctx: ctx, op: o, txCancel: ct.cancel}
		if level := ct.snapDefault; level != sql.LevelDefault {
			// No level was asked for, and the server's default takes its
			// snapshot once: the lock statement just took it, before the
			// lock. Give the lock back and take the split protocol's path
			// at that level, explicitly.
			_ = lt.Rollback()
			split := &sql.TxOptions{Isolation: level}
			if opts != nil {
				split.ReadOnly = opts.ReadOnly
			}
			return o.beginSplit(ctx, db, split)
		}
		if err := o.IssueToken(ctx, db); err != nil { // fencing: committed on the pool
			_ = lt.Rollback()
			return nil, err
		}
		return lt, nil
	}
	tx, txCancel, err := o.beginOn(ctx, conn, opts)
	if err != nil {
		Destroy(conn)
		return nil, err
	}
	// No level asked for: the lock's statement reads the server's default,
	// which may take the snapshot once (as the one-message path does).
	var iso *string
	if opts == nil || opts.Isolation == sql.LevelDefault {
		iso = new(string)
	}
	if err := o.acquireXact(ctx, tx, iso); err != nil {
		if errors.Is(err, errSnapshotTaken) {
			// the snapshot predates the lock: give the transaction (and
			// the lock, if it was taken) back, and take the split
			// protocol's path at that level, explicitly
			if withinGrace(ctx, txCancel, tx.Rollback) != nil {
				Destroy(conn)
			} else {
				_ = conn.Close()
			}
			level, _ := snapshotLevel(*iso)
			split := &sql.TxOptions{Isolation: level}
			if opts != nil {
				split.ReadOnly = opts.ReadOnly
			}
			return o.beginSplit(ctx, db, split)
		}
		if withinGrace(ctx, txCancel, tx.Rollback) != nil || !cleanNotAcquired(err) {
			Destroy(conn)
		} else {
			_ = conn.Close()
		}
		return nil, err
	}
	lt := &LockedTx{Tx: tx, ctx: ctx, op: o, conn: conn, txCancel: txCancel}
	if err := o.IssueToken(ctx, db); err != nil { // fencing: committed on the pool
		_ = lt.Rollback()
		return nil, err
	}
	return lt, nil
}

// beginSplit is the PostgreSQL protocol for REPEATABLE READ and
// SERIALIZABLE (see BeginLocked).
func (o *Op) beginSplit(ctx context.Context, db *sql.DB, opts *sql.TxOptions) (*LockedTx, error) {
	if db.Stats().MaxOpenConnections == 1 {
		return nil, fmt.Errorf("%w: %s on %q at isolation %s needs two connections (the lock is held on one, in a READ COMMITTED transaction, so that the transaction on the other takes its snapshot after the lock is granted), and the pool's MaxOpenConns is 1",
			ormlock.ErrInvalidArgument, o.Verb, o.Key.String(), opts.Isolation)
	}
	conn, err := o.pin(ctx, db)
	if err != nil {
		return nil, err
	}
	lk, err := o.holdLockTx(ctx, db, conn, false)
	if err != nil {
		return nil, err
	}
	if err := o.IssueToken(ctx, db); err != nil { // fencing: committed on the pool
		lk.end(ctx)
		o.EndXact(ctx)
		return nil, err
	}
	// fn's transaction, on a connection of its own: its first statement,
	// fn's, takes the snapshot, after the lock was granted.
	txCtx, txCancel := txContext(ctx)
	stop := bound(ctx, txCancel)
	tx, err := o.beginSplitTx(txCtx, db, opts)
	if stopped := stop(); err == nil && !stopped {
		// ctx ended as BEGIN returned: database/sql is rolling tx back
		err = ctx.Err()
		o.dropSplitTx(tx)
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

func (o *Op) beginMySQL(ctx context.Context, db *sql.DB, opts *sql.TxOptions) (*LockedTx, error) {
	conn, err := o.LockNamed(ctx, db)
	if err != nil {
		return nil, err
	}
	if err := o.keepCompletionType(ctx, conn); err != nil {
		_ = o.ReleaseNamed(ctx, conn)
		return nil, err
	}
	if err := o.IssueToken(ctx, conn); err != nil { // fencing: committed before BEGIN
		_ = o.ReleaseNamed(ctx, conn)
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
		// ReleaseNamed destroys it when the release is not confirmed
		rerr := o.ReleaseNamed(ctx, conn)
		if cerr := ctxErr(ctx); cerr != nil && !errors.Is(err, cerr) {
			err = errs.Join(cerr, err)
		}
		if connGone(rerr) && !isCtxErr(rerr) {
			// the lock's connection broke, or the driver closed it as the
			// context ended during BEGIN: the lock went with it (fn did
			// not run)
			return nil, errs.Mark(ormlock.ErrLockLost, err, "%s on %q: begin transaction", o.Verb, o.Key.String())
		}
		return nil, errs.Wrap(err, "begin transaction")
	}
	return &LockedTx{Tx: tx, ctx: ctx, op: o, conn: conn, txCancel: txCancel}, nil
}

// beginOn begins a transaction on conn whose context outlives ctx, with the
// BEGIN itself bounded by ctx. A failure has been classified (ctx ended:
// not acquired); the caller disposes of conn.
func (o *Op) beginOn(ctx context.Context, conn *sql.Conn, opts *sql.TxOptions) (*sql.Tx, context.CancelFunc, error) {
	txCtx, txCancel := txContext(ctx)
	stop := bound(ctx, txCancel)
	tx, err := conn.BeginTx(txCtx, opts)
	if stopped := stop(); err == nil && !stopped {
		err = ctx.Err() // database/sql is rolling tx back
	}
	if err != nil {
		txCancel()
		return nil, nil, o.failed(ctx, errs.Wrap(err, "begin transaction"))
	}
	return tx, txCancel, nil
}

// cleanNotAcquired reports whether err is a plain "held elsewhere", after
// which the connection is known to be in a clean state.
func cleanNotAcquired(err error) bool {
	return errors.Is(err, ormlock.ErrNotAcquired) && !isCtxErr(err) && SQLState(err) == ""
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
			t.op.Emit(t.ctx, ormlock.EventLockLost, lerr)
			t.end()
			return errs.Mark(ormlock.ErrLockLost, lerr, "%q: the lock transaction failed before COMMIT", t.op.Key.String())
		}
	}
	if cerr := t.ctx.Err(); cerr != nil {
		rerr := t.rollback()
		err = cerr
		if connGone(rerr) && !isCtxErr(rerr) {
			err = t.lockLost("ROLLBACK", rerr)
		}
	} else {
		if t.implicitCommit() {
			t.warnImplicitCommit()
		}
		if t.op.Dialect == MySQL && t.ctx.Done() != nil {
			err = t.mysqlEnd("COMMIT", t.Tx.Commit)
		} else {
			err = withinGrace(t.ctx, t.txCancel, t.Tx.Commit)
		}
		switch {
		case err != nil && t.ctx.Err() != nil:
			err = errs.Mark(ormlock.ErrCommitUnknown, errs.Join(t.ctx.Err(), err), "%q: COMMIT cut short after the context ended", t.op.Key.String())
		case connGone(err) && unsent(err):
			if t.lock == nil {
				err = t.lockLost("COMMIT (not sent: the transaction did not commit)", err)
			}
		case connGone(err) && t.lock != nil:
			// fn's transaction, on its own connection (the lock was
			// confirmed before COMMIT)
			err = errs.Mark(ormlock.ErrCommitUnknown, err, "%q: COMMIT", t.op.Key.String())
		case connGone(err):
			err = errs.Mark(ormlock.ErrCommitUnknown, t.lockLost("COMMIT", err), "")
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
	if t.op.Dialect == MySQL && t.ctx.Done() != nil {
		return t.mysqlEnd("ROLLBACK", t.Tx.Rollback)
	}
	return withinGrace(t.ctx, t.txCancel, t.Tx.Rollback)
}

// Token returns the fencing token of the lock (ormlock.WithFencing).
func (t *LockedTx) Token() (int64, bool) { return t.op.Token() }

// Rollback rolls the transaction back, then releases the lock. When the
// ROLLBACK or the release finds the lock's connection gone (it broke, or
// the driver closed it as a statement's context ended), the error wraps
// ormlock.ErrLockLost: the lock may have been free while fn ran.
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
		switch t.op.Dialect {
		case Postgres:
			switch {
			case t.lock != nil:
				err = t.lock.end(t.ctx)
			case t.conn != nil:
				_ = t.conn.Close()
			}
			// a *ConnTx gave its connection back or destroyed it as it ended
			t.op.EndXact(t.ctx)
		case MySQL:
			err = t.op.ReleaseNamed(t.ctx, t.conn)
		}
	})
	return err
}

// ---- bounding the detached transaction ----

// txContext returns the context a transaction is begun with: ctx's values
// without its cancellation (database/sql rolls back a transaction whose
// context ends, at once, which would drop a PostgreSQL lock under a running
// fn), and its cancel, which bounds BEGIN, COMMIT and ROLLBACK: database/sql
// and pgx run those with the transaction's context. A context that can
// never end is returned as it is, with nothing to cancel (see waitCtx).
func txContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil {
		return ctx, func() {}
	}
	return context.WithCancel(context.WithoutCancel(ctx))
}

// bound cancels a transaction's context (cancel, from txContext) when ctx
// ends, until stop is called; stop reports false when that already happened.
// It is armed around BEGIN, the lock and COMMIT, never while fn runs.
func bound(ctx context.Context, cancel context.CancelFunc) (stop func() bool) {
	if ctx.Done() == nil {
		return func() bool { return true }
	}
	return context.AfterFunc(ctx, cancel)
}

// endGrace is how long a COMMIT or ROLLBACK may run after the caller's
// context ended before it is cut (a healthy server answers in
// milliseconds): a COMMIT under way when the deadline passes still gets a
// true answer, and a server that stopped answering cannot hold the caller
// longer than this past its deadline.
const endGrace = time.Second

// withinGrace runs end (tx.Commit or tx.Rollback, which database/sql and
// pgx run with the transaction's own context) and cancels that context,
// which makes the driver give up and close the connection, endGrace after
// ctx has ended.
func withinGrace(ctx context.Context, cancel context.CancelFunc, end func() error) error {
	if ctx.Done() == nil {
		return end()
	}
	var (
		mu    sync.Mutex
		timer *time.Timer
		done  bool
	)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			timer = time.AfterFunc(endGrace, cancel)
		}
	})
	err := end()
	stop()
	mu.Lock()
	done = true
	if timer != nil {
		timer.Stop()
	}
	mu.Unlock()
	return err
}

// ---- the split protocol's lock transaction ----

// pgLockTx is a PostgreSQL xact lock held by a READ COMMITTED transaction of
// its own on a pinned connection (Session's lock, and the split protocol's).
type pgLockTx struct {
	conn   *sql.Conn
	tx     TxConn // a *ConnTx with pgx
	cancel context.CancelFunc
	idle   time.Duration // idle_in_transaction_session_timeout, read for a Session
}

// holdLockTx begins a READ COMMITTED transaction on conn and takes o's lock
// in it, each wait bounded by ctx. long (Session) first turns
// transaction_timeout off for that transaction, before the lock so that a
// long wait is not cut by it either (see PGKeepTransaction); the split
// protocol's lock transaction lives no longer than fn's, which the timeout
// bounds anyway. On failure conn has been given back (a clean "held
// elsewhere") or destroyed.
func (o *Op) holdLockTx(ctx context.Context, db *sql.DB, conn *sql.Conn, long bool) (*pgLockTx, error) {
	if isPgx(conn) {
		// one message: BEGIN, transaction_timeout off (long), the lock and
		// (long) the idle timeout, by the simple protocol, which leaves no
		// portal open: the idle transaction holds no snapshot
		ct, idle, err := o.lockOneMessage(ctx, db, conn, "BEGIN ISOLATION LEVEL READ COMMITTED", long, false)
		if err != nil {
			return nil, err
		}
		return &pgLockTx{conn: conn, tx: ct, cancel: ct.cancel, idle: idle}, nil
	}
	tx, cancel, err := o.beginOn(ctx, conn, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		Destroy(conn)
		return nil, err
	}
	lk := &pgLockTx{conn: conn, tx: tx, cancel: cancel}
	if long {
		if err := PGKeepTransaction(ctx, tx); err != nil {
			err = o.failed(ctx, err)
			lk.drop(ctx, err)
			return nil, err
		}
	}
	if err := o.AcquireXact(ctx, tx); err != nil {
		lk.drop(ctx, err)
		return nil, err
	}
	return lk, nil
}

// confirm proves the lock transaction alive, hence the lock held.
func (l *pgLockTx) confirm(ctx context.Context) error { return PGPing(ctx, l.tx) }

// rollback ends the lock transaction, bounded by ctx (the release context),
// which also cancels the transaction's own context should it end first.
func (l *pgLockTx) rollback(ctx context.Context) error {
	defer l.cancel()
	stop := context.AfterFunc(ctx, l.cancel)
	defer stop()
	return l.tx.Rollback()
}

// end releases the lock (ROLLBACK, bounded as releaseWithin says) and gives the
// connection back, or destroys it when the ROLLBACK failed.
func (l *pgLockTx) end(ctx context.Context) error {
	if err := releaseWithin(ctx, l.rollback); err != nil {
		Destroy(l.conn)
		return err
	}
	_ = l.conn.Close()
	return nil
}

// drop ends a lock transaction whose lock was not taken (err says why).
func (l *pgLockTx) drop(ctx context.Context, err error) {
	if releaseWithin(ctx, l.rollback) != nil || !cleanNotAcquired(err) {
		Destroy(l.conn)
		return
	}
	_ = l.conn.Close()
}
