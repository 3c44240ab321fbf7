package lockproto

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"sync"
	"time"
)

// PostgreSQL: BEGIN and the lock in one message.
//
// With pgx (gorm.io/driver/postgres's driver, and ent's usual one) the
// protocol sends BEGIN and the lock as one simple-protocol query string, so
// a locked transaction costs the round trips of an unlocked one:
//
//	BEGIN ISOLATION LEVEL READ COMMITTED; SELECT pg_try_advisory_xact_lock((-42)::int8)
//
// The key is an integer, written as a literal with strconv, never text from
// a caller. database/sql cannot be told that a transaction is open on a
// connection it did not begin, so the transaction is driven on the pinned
// *sql.Conn itself (OneMessageTx, below): the caller's statements run
// on that connection, and COMMIT and ROLLBACK are sent by OneMessageTx,
// which checks the server's transaction status afterwards and destroys the
// connection unless it is idle, outside any transaction. The pgx side of
// it (the message on pgconn) is internal/pgxdriver's, behind PgWire
// (pgdriver.go). Other drivers (lib/pq, anything not pgx),
// GORM's PrepareStmt (its statement cache needs a *sql.Tx) and isolation
// levels database/sql's pgx driver would refuse take the two-message path
// (BEGIN through database/sql, then the lock).

// errNoOneMessage reports that the one-message path does not apply (not a
// pgx connection); nothing was sent.
var errNoOneMessage = errors.New("ormlock: not a pgx connection")

// lockTxFor says what the transaction that a lock message begins is for.
type lockTxFor uint8

const (
	// forFn is the caller's transaction, in which fn runs: on a direct
	// connection its try-once lock is the prepared statement (prepared.go).
	forFn lockTxFor = iota
	// forSplit is the split protocol's lock-only transaction (split.go).
	forSplit
	// forSession is a Session's lock-only transaction: the message also
	// turns transaction_timeout off and reads
	// idle_in_transaction_session_timeout (see pgLockMessage).
	forSession
)

// lockOneMessage begins a transaction with begin on the pinned pgx
// connection conn (see isPgx) and takes o's lock in the same message (see
// pgLockMessage, pgShapeMessage and pgThenMessage; for fn's transaction a
// try-once lock may be the prepared statement, see pgTryStmt). On success it returns the transaction, which
// owns conn from then on, and for a Session the session's
// idle_in_transaction_session_timeout; on failure conn has been given back
// (its transaction ended: ROLLBACK confirmed by the server) or destroyed,
// and the error is classified as AcquireXact's.
func (pgAdvisory) lockOneMessage(ctx context.Context, o *Op, db *sql.DB, conn pinned, begin string, use lockTxFor) (*OneMessageTx, time.Duration, error) {
	wait, bounded, err := attempt(ctx, o)
	if err != nil {
		conn.giveBack() // nothing was sent
		return nil, 0, err
	}
	long := use == forSession
	wantIso := !strings.Contains(begin, "ISOLATION")
	var x lockExchange
	w, err := conn.wire()
	if err == nil {
		err = x.lock(ctx, o, w, begin, use, wait, long, wantIso)
	}
	rep, status := x.rep, x.status
	// a lock that came as the caller gave up is given back below, by a
	// ROLLBACK the server confirms
	ok, err := lockOutcome(ctx, &x, err, wait)
	txCtx, txCancel := txContext(ctx)
	tx := &OneMessageTx{pin: conn, conn: conn.sqlConn(), db: db, ctx: txCtx, cancel: txCancel}
	if wantIso {
		tx.snapDefault = rep.level
	}
	if err == nil && ok {
		return tx, rep.idle, settle(ctx, o, true, bounded, nil)
	}
	// Not acquired, or failed: end the transaction the message began. The
	// connection goes back to the pool only when the server confirms it is
	// outside any transaction (OneMessageTx.end).
	if status == 'I' && err == nil {
		tx.markDone()
		txCancel()
		conn.giveBack()
	} else {
		rollbackRefused(ctx, o, tx, txCancel, err == nil && status == 'T')
	}
	return nil, 0, settle(ctx, o, false, bounded, err)
}

// lockSend sends o's lock message on x's connection (see lockOneMessage):
// as text (a set's or a semaphore's one statement: pgShapeMessage; one key
// followed by RunOnce's claim: pgThenMessage), or on a direct connection as
// the prepared statement.
func (pgAdvisory) lockSend(o *Op, x *lockExchange, begin string, use lockTxFor, wait time.Duration, long, wantIso bool) error {
	if o.target.several() {
		return lockShape(o, x, begin, use, wait, long, wantIso)
	}
	if o.sendsThen(use) {
		err := x.send(pgThenMessage(o, begin, wait, wantIso))
		o.then.ran, o.then.rows, o.then.err = err == nil && x.rep.ok, x.rep.then, x.rep.thenErr
		return err
	}
	var ps *pgConnState
	if use == forFn && wait == 0 && o.target.Simple() {
		ps = pgConnStateOf(x.pc)
	}
	if ps == nil || (ps.known && !ps.direct) {
		// with fencing the message reads the backend's pid, which the
		// token's issuance checks (fence.go)
		fence := o.Cfg.Fencing
		err := x.send(pgLockMessage(begin, o.target.pg, o.target.sharedOne(), wait, long, fence), lockLayout{wait: wait > 0, long: long, iso: wantIso, pid: fence})
		o.fence.pid = x.rep.pid
		return err
	}
	if !ps.known {
		// the first lock on this connection: as text, with the pid
		err := x.send(pgLockMessage(begin, o.target.pg, false, 0, false, true), lockLayout{iso: wantIso, pid: true})
		if err == nil {
			ps.known, ps.direct = true, x.rep.pid != 0 && x.rep.pid == x.pc.PID()
		}
		o.fence.pid = x.rep.pid
		return err
	}
	return pgMech.lockPrepared(o, x, ps, begin)
}

// lockExchange sends lock messages on one connection's wire, keeping the
// reply to the last one and the transaction status after it.
type lockExchange struct {
	ctx    context.Context
	pc     PgWire
	rep    lockReply
	status byte
}

// lock sends o's lock message on w (lockSend), and for a semaphore with a
// wait its further rounds (pgShapeRounds), with x.ctx ending as ctx does:
// a cancellation asks the server to end the statement, which leaves
// nothing waiting there (see stmtCtx); a semaphore's statements only try
// (its wait is rounds of them: pgshape.go). Read the outcome with
// lockOutcome.
func (x *lockExchange) lock(ctx context.Context, o *Op, w PgWire, begin string, use lockTxFor, wait time.Duration, long, wantIso bool) error {
	x.pc = w
	var sc serverCancel
	if ctx.Done() != nil {
		sc = w.CancelRequest
	}
	var done func()
	x.ctx, done = stmtCtx(ctx, wait > 0 && !o.target.anyOne(), sc)
	defer done()
	return pgShapeRounds(ctx, o, x, wait, pgMech.lockSend(o, x, begin, use, wait, long, wantIso))
}

// send sends msg and reads its reply, whose last row is laid out as l says.
func (x *lockExchange) send(msg string, l lockLayout) error {
	var err error
	x.rep, err = readLockReply(x.pc.Exec(x.ctx, msg), l)
	x.status = x.pc.TxStatus()
	if err == nil && x.pc.IsClosed() {
		err = errors.New("connection closed")
	}
	return err
}

// The transaction of a one-message BEGIN, which database/sql does not know
// about, driven on its pinned connection.

// OneMessageTx is a PostgreSQL transaction begun on a pinned connection by a
// message of the protocol's own (BEGIN and the lock together), which
// database/sql does not know about. Statements run on the connection;
// Commit and Rollback send COMMIT or ROLLBACK, bounded by the transaction's
// own context, then give the connection back to the pool only when the
// server reports it idle outside any transaction, and destroy it otherwise.
// After Commit or Rollback, Exec, Query and Prepare return sql.ErrTxDone and
// QueryRow's row fails with sql.ErrConnDone, as on a *sql.Tx that ended.
//
// It is what GORM sees as the transaction's ConnPool (a gorm.TxCommitter,
// so GORM and dbresolver treat it as a transaction: nested calls use
// savepoints) and what ent's dialect.Tx runs statements on.
type OneMessageTx struct {
	pin    pinned    // the connection, of either kind (pinned)
	conn   *sql.Conn // pin's *sql.Conn; nil on a connection of Op.LockConns (see ExecContext)
	db     *sql.DB
	ctx    context.Context // the transaction's own context: bounds COMMIT and ROLLBACK
	cancel context.CancelFunc

	// snapDefault is the server's transaction_isolation when BEGIN named
	// no level and that level takes its snapshot once (snapshotLevel);
	// LevelDefault otherwise.
	snapDefault sql.IsolationLevel

	mu   sync.Mutex
	done bool
}

func (t *OneMessageTx) markDone() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	was := t.done
	t.done = true
	return was
}

func (t *OneMessageTx) ended() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.done
}

// usable is what a *sql.Tx checks before a statement: the transaction
// has not ended and ctx has not. A statement on an ended context must not
// reach pgx, which answers it with driver.ErrBadConn (nothing was sent),
// upon which database/sql closes the connection under the open transaction:
// its lock would then be freed only when the server notices.
func (t *OneMessageTx) usable(ctx context.Context) error {
	if t.ended() {
		return sql.ErrTxDone
	}
	return ctx.Err()
}

// ExecContext runs a statement in the transaction. On a connection of
// Op.LockConns it runs through its driver (LockConn.Exec): the protocol's
// own statements on a Session's lock transaction (the keepalive, the
// owner); fn works on the driver's connection itself (LockedTx.Conn).
func (t *OneMessageTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if err := t.usable(ctx); err != nil {
		return nil, err
	}
	if t.conn == nil {
		n, err := lockConnOf(t.pin).Exec(ctx, query, args...)
		if err != nil {
			return nil, err
		}
		return rowsResult(n), nil
	}
	return t.conn.ExecContext(ctx, query, args...)
}

// rowsResult is the sql.Result of a statement run by LockConn.Exec.
type rowsResult int64

func (rowsResult) LastInsertId() (int64, error) {
	return 0, errors.New("ormlock: LastInsertId is not supported by PostgreSQL")
}
func (r rowsResult) RowsAffected() (int64, error) { return int64(r), nil }

// errPgxConn refuses database/sql's rows on a pgx pool's connection.
var errPgxConn = errors.New("ormlock: the transaction's connection is a pgx pool's: query it through pgx")

// QueryContext runs a query in the transaction (a *sql.DB's connection
// only: see errPgxConn).
func (t *OneMessageTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if err := t.usable(ctx); err != nil {
		return nil, err
	}
	if t.conn == nil {
		return nil, errPgxConn
	}
	return t.conn.QueryContext(ctx, query, args...)
}

// QueryRowContext runs a query that returns at most one row in the
// transaction (a *sql.DB's connection only: on a pgx pool's the row fails
// as on an ended context).
func (t *OneMessageTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if ctx.Err() != nil || t.conn == nil {
		// the pool checks ctx before it takes a connection: a row that
		// carries ctx's error, without touching any connection
		if ctx.Err() == nil {
			c, cancel := context.WithCancel(ctx)
			cancel()
			ctx = c
		}
		db := t.db
		if db == nil { // pgxlock's call may have opened none
			db = noDB()
		}
		return db.QueryRowContext(ctx, query, args...)
	}
	return t.conn.QueryRowContext(ctx, query, args...)
}

// noDB is a *sql.DB that never connects, for the row of a query that an
// ended context refuses (QueryRowContext) when the transaction has no
// *sql.DB: opened the first time it is needed, never in practice.
var noDB = sync.OnceValue(func() *sql.DB { return sql.OpenDB(noConnector{}) })

type noConnector struct{}

func (noConnector) Connect(context.Context) (driver.Conn, error) { return nil, errPgxConn }
func (noConnector) Driver() driver.Driver                        { return noDriver{} }

type noDriver struct{}

func (noDriver) Open(string) (driver.Conn, error) { return nil, errPgxConn }

// PrepareContext prepares a statement on the transaction's connection; it
// is valid until the transaction ends (a *sql.DB's connection only).
func (t *OneMessageTx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	if err := t.usable(ctx); err != nil {
		return nil, err
	}
	if t.conn == nil {
		return nil, errPgxConn
	}
	return t.conn.PrepareContext(ctx, query)
}

// GetDBConn returns the pool the connection came from (GORM's DB()).
func (t *OneMessageTx) GetDBConn() (*sql.DB, error) { return t.db, nil }

// Commit sends COMMIT. A transaction the server had aborted answers COMMIT
// with ROLLBACK: that is pgx's ErrTxCommitRollback, as from a *sql.Tx.
func (t *OneMessageTx) Commit() error { return t.end("COMMIT") }

// Rollback sends ROLLBACK.
func (t *OneMessageTx) Rollback() error { return t.end("ROLLBACK") }

func (t *OneMessageTx) end(stmt string) error { return t.endRead(stmt, nil) }

// endRead is end, reading into seen (when set) the first column of the
// first row of the message's answer (a statement before ROLLBACK).
func (t *OneMessageTx) endRead(stmt string, seen *bool) error {
	if t.markDone() {
		return sql.ErrTxDone
	}
	idle := false
	w, err := t.pin.wire()
	if err == nil {
		idle, err = pgEnd(t.ctx, w, stmt, seen)
		if err != nil && stmt != "COMMIT" && stmt != "ROLLBACK" && !w.IsClosed() {
			idle, err = endFailed(t.ctx, w, err) // CommitWith's statement failed
		}
	}
	if idle {
		t.pin.giveBack()
	} else {
		t.pin.destroy()
	}
	t.cancel()
	return err
}

// pgEnd sends stmt (COMMIT or ROLLBACK, maybe after a statement: CommitWith,
// rollbackRefused, whose first row's first column is read into seen) on w
// and reports whether the
// server then says the connection is idle outside any transaction. A
// COMMIT the server answered with ROLLBACK is the driver's
// ErrCommitRollback, as from its own transactions.
func pgEnd(ctx context.Context, w PgWire, stmt string, seen *bool) (idle bool, err error) {
	r := w.Exec(ctx, stmt)
	rolledBack := false
	for r.NextResult() {
		for seen != nil && r.NextRow() {
			*seen, seen = len(r.Values()) > 0 && string(r.Values()[0]) == "t", nil
		}
		tag, _ := r.CloseResult()
		rolledBack = tag == "ROLLBACK" // the last statement's: COMMIT's
	}
	err = r.Close()
	idle = err == nil && w.TxStatus() == 'I'
	if err != nil {
		return idle, err
	}
	if strings.HasSuffix(stmt, "COMMIT") && rolledBack {
		return idle, pgDriver.ErrCommitRollback()
	}
	return idle, nil
}
