package lockproto

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ormlock/ormlock/internal/errs"
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
// connection unless it is idle, outside any transaction. Other drivers (lib/pq, anything not pgx),
// GORM's PrepareStmt (its statement cache needs a *sql.Tx) and isolation
// levels database/sql's pgx driver would refuse take the two-message path
// (BEGIN through database/sql, then the lock).

// errNoOneMessage reports that the one-message path does not apply (not a
// pgx connection); nothing was sent.
var errNoOneMessage = errors.New("ormlock: not a pgx connection")

// pgxConner is what pgx's database/sql driver connection (*stdlib.Conn)
// exposes.
type pgxConner interface{ Conn() *pgx.Conn }

// withPgConn runs f on conn's pgx connection, or returns errNoOneMessage.
func withPgConn(conn *sql.Conn, f func(pc *pgconn.PgConn) error) error {
	return conn.Raw(func(dc any) error {
		c, ok := dc.(pgxConner)
		if !ok {
			return errNoOneMessage
		}
		return f(c.Conn().PgConn())
	})
}

// isPgx reports whether conn is a pgx connection, on which the lock can
// travel with BEGIN (lockOneMessage).
func isPgx(conn *sql.Conn) bool {
	return withPgConn(conn, func(*pgconn.PgConn) error { return nil }) == nil
}

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
// pgLockMessage; for fn's transaction a try-once lock may be the prepared
// statement, see pgTryStmt). On success it returns the transaction, which
// owns conn from then on, and for a Session the session's
// idle_in_transaction_session_timeout; on failure conn has been given back
// (its transaction ended: ROLLBACK confirmed by the server) or destroyed,
// and the error is classified as AcquireXact's.
func (o *Op) lockOneMessage(ctx context.Context, db *sql.DB, conn pinned, begin string, use lockTxFor) (*OneMessageTx, time.Duration, error) {
	wait, bounded, err := o.attempt(ctx)
	if err != nil {
		conn.giveBack() // nothing was sent
		return nil, 0, err
	}
	long := use == forSession
	wantIso := !strings.Contains(begin, "ISOLATION")
	var x lockExchange
	done := noop
	pc, err := conn.pgConn()
	if err == nil {
		x.pc = pc
		// a cancellation asks the server to end the statement, which
		// leaves nothing waiting there (see stmtCtx)
		var sc serverCancel
		if ctx.Done() != nil {
			sc = pc.CancelRequest
		}
		x.ctx, done = stmtCtx(ctx, wait > 0, sc)
		err = o.lockSend(&x, begin, use, wait, long, wantIso)
	}
	rep, status := x.rep, x.status
	done()
	ok := rep.ok
	if err != nil && wait > 0 && SQLState(err) == sqlStateLockNotAvailable {
		err = nil // lock_timeout expired: held elsewhere
	}
	if err == nil && ok && status != 'T' {
		err = fmt.Errorf("transaction status %q after the lock", status)
	}
	if err != nil {
		err = errs.Wrap(err, "BEGIN and pg_advisory_xact_lock")
	} else if ok && ctx.Err() != nil {
		// the lock came as the caller gave up: given back below, by a
		// ROLLBACK the server confirms
		ok, err = false, ctx.Err()
	}
	txCtx, txCancel := txContext(ctx)
	tx := &OneMessageTx{pin: conn, conn: conn.sqlConn(), db: db, ctx: txCtx, cancel: txCancel}
	if wantIso {
		tx.snapDefault = rep.level
	}
	if err == nil && ok {
		return tx, rep.idle, o.settle(ctx, true, bounded, nil)
	}
	// Not acquired, or failed: end the transaction the message began. The
	// connection goes back to the pool only when the server confirms it is
	// outside any transaction (OneMessageTx.end).
	if status == 'I' && err == nil {
		tx.markDone()
		txCancel()
		conn.giveBack()
	} else {
		_ = withinGrace(ctx, txCancel, tx.Rollback)
	}
	return nil, 0, o.settle(ctx, false, bounded, err)
}

// lockSend sends o's lock message on x's connection (see lockOneMessage):
// as text, or on a direct connection as the prepared statement.
func (o *Op) lockSend(x *lockExchange, begin string, use lockTxFor, wait time.Duration, long, wantIso bool) error {
	var ps *pgConnState
	if use == forFn && wait == 0 && o.target.Simple() {
		ps = pgConnStateOf(x.pc)
	}
	if ps == nil || (ps.known && !ps.direct) {
		// with fencing the message reads the backend's pid, which the
		// token's issuance checks (fence.go)
		fence := o.Cfg.Fencing
		err := x.send(pgLockMessage(begin, o.target.pg, o.target.kind == kindShared, wait, long, fence), lockLayout{wait: wait > 0, long: long, iso: wantIso, pid: fence})
		o.lockPID = x.rep.pid
		return err
	}
	if !ps.known {
		// the first lock on this connection: as text, with the pid
		err := x.send(pgLockMessage(begin, o.target.pg, false, 0, false, true), lockLayout{iso: wantIso, pid: true})
		if err == nil {
			ps.known, ps.direct = true, x.rep.pid != 0 && x.rep.pid == x.pc.PID()
		}
		o.lockPID = x.rep.pid
		return err
	}
	return o.lockPrepared(x, ps, begin)
}

// noop is the release of a context that needs none.
func noop() {}

// pgCancelOf returns the CancelRequest of conn's pgx connection (see
// stmtCtx), nil when conn is not pgx's. The caller keeps conn pinned while
// it may call it.
func pgCancelOf(conn *sql.Conn) serverCancel { return pinCancel(sqlPin{conn}) }

// pinCancel is pgCancelOf for a pinned connection of either kind.
func pinCancel(conn pinned) serverCancel {
	pc, err := conn.pgConn()
	if err != nil {
		return nil
	}
	return pc.CancelRequest
}

// lockExchange sends lock messages on one pgx connection, keeping the reply
// to the last one and the transaction status after it.
type lockExchange struct {
	ctx    context.Context
	pc     *pgconn.PgConn
	rep    lockReply
	status byte
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

// The connection a PostgreSQL lock is taken on: pinned from a *sql.DB
// (database/sql, any driver), or, for pgxlock, acquired from the
// *pgxpool.Pool itself and driven by pgx with no database/sql layer
// (Op.Pgx). The one-message paths (this file, lockonlytx.go,
// Session) take either; everything else keeps its *sql.Conn.

// pinned is a connection pinned for one lock use.
type pinned interface {
	// pgConn is the connection's pgconn, or errNoOneMessage (not a pgx
	// connection; nothing was sent); valid while the connection is pinned.
	pgConn() (*pgconn.PgConn, error)
	// sqlConn is the *sql.Conn, nil for a pgx pool's connection.
	sqlConn() *sql.Conn
	// giveBack returns the connection to its pool; a connection the
	// server does not report idle outside any transaction is destroyed
	// by the caller instead (destroy).
	giveBack()
	// destroy closes the connection, which never goes back to its pool:
	// the server frees what it held when it sees the socket close.
	destroy()
}

// sqlPin is a connection pinned from a *sql.DB.
type sqlPin struct{ c *sql.Conn }

func (p sqlPin) pgConn() (*pgconn.PgConn, error) {
	var pc *pgconn.PgConn
	err := withPgConn(p.c, func(c *pgconn.PgConn) error { pc = c; return nil })
	return pc, err
}
func (p sqlPin) sqlConn() *sql.Conn { return p.c }
func (p sqlPin) giveBack()          { _ = p.c.Close() }
func (p sqlPin) destroy()           { Destroy(p.c) }

// pgxPin is a connection acquired from a pgx pool. Like a *sql.Conn's
// Close, its giveBack and destroy act once: the first of them (the end of
// the transaction that held the lock) decides, later calls do nothing.
type pgxPin struct {
	c    *pgxpool.Conn
	done atomic.Bool
}

func (p *pgxPin) pgConn() (*pgconn.PgConn, error) {
	if p.done.Load() {
		return nil, sql.ErrConnDone
	}
	return p.c.Conn().PgConn(), nil
}

func (p *pgxPin) sqlConn() *sql.Conn { return nil }

// giveBack releases the connection to the pool, which itself destroys a
// connection that is closed, busy or inside a transaction.
func (p *pgxPin) giveBack() {
	if !p.done.Swap(true) {
		p.c.Release()
	}
}

// destroy takes the connection out of the pool and closes it at once: an
// ended context makes pgconn close the socket without waiting on the
// server.
func (p *pgxPin) destroy() {
	if p.done.Swap(true) {
		return
	}
	conn := p.c.Hijack()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = conn.Close(ctx)
}

// pgxConnOfPin is the pgx connection under p, nil when p is not a pgx
// pool's.
func pgxConnOfPin(p pinned) *pgx.Conn {
	if pp, ok := p.(*pgxPin); ok {
		return pp.c.Conn()
	}
	return nil
}

// pinLock pins the connection o's lock is taken on, waiting no longer than
// ctx allows: from o.Pgx when native (pgxNative), else from db (pin).
func (o *Op) pinLock(ctx context.Context, db *sql.DB, native bool) (pinned, error) {
	if !native {
		c, err := o.pin(ctx, db)
		if err != nil {
			return nil, err
		}
		return sqlPin{c}, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, o.notAcquired(ctx, err)
	}
	c, err := o.Pgx.Acquire(ctx)
	if err != nil {
		return nil, o.failed(ctx, errs.Wrap(err, "pin a connection"))
	}
	return &pgxPin{c: c}, nil
}

// oneMessageOn reports whether the lock can travel with BEGIN on conn:
// a pgx pool's connection, or a *sql.Conn of pgx's driver (isPgx).
func oneMessageOn(conn pinned) bool {
	sc := conn.sqlConn()
	return sc == nil || isPgx(sc)
}

// pgxNative reports whether o's lock connection comes from o.Pgx, driven
// by pgx itself: PostgreSQL, a target that travels in one message, and no
// shared lock connections (which live under the *sql.DB).
func (o *Op) pgxNative() bool {
	return o.Pgx != nil && o.Dialect == Postgres && o.target.oneMessage() && o.Cfg.SharedConns == 0
}

// LazyDB is a *sql.DB opened on first use (Op.LazyDB; pgxlock's, made by
// verbs.OpenLazily): DB opens it, the queries of the server check run on
// it, and Close closes it if it was opened.
type LazyDB interface {
	DB() *sql.DB
	Close()
	CheckQuerier
}

// sqlDB is db, or when db is nil the *sql.DB o.LazyDB opens (pgxlock's
// Transaction, Session and Lead are given none: their lock connection
// comes from o.Pgx, and only the paths that need database/sql open it).
func (o *Op) sqlDB(db *sql.DB) *sql.DB {
	if db == nil && o.LazyDB != nil {
		return o.LazyDB.DB()
	}
	return db
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
	conn   *sql.Conn // pin's *sql.Conn; nil on a pgx pool's connection (see ExecContext)
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

// ExecContext runs a statement in the transaction. On a pgx pool's
// connection (Op.Pgx) it runs through pgx: the protocol's own statements
// on a Session's lock transaction (the keepalive, the owner); fn works on
// the pgx connection itself (LockedTx.PgxConn).
func (t *OneMessageTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if err := t.usable(ctx); err != nil {
		return nil, err
	}
	if t.conn == nil {
		tag, err := pgxConnOfPin(t.pin).Exec(ctx, query, args...)
		if err != nil {
			return nil, err
		}
		return pgxResult(tag.RowsAffected()), nil
	}
	return t.conn.ExecContext(ctx, query, args...)
}

// pgxResult is the sql.Result of a statement run through pgx.
type pgxResult int64

func (pgxResult) LastInsertId() (int64, error) {
	return 0, errors.New("ormlock: LastInsertId is not supported by PostgreSQL")
}
func (r pgxResult) RowsAffected() (int64, error) { return int64(r), nil }

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

func (t *OneMessageTx) end(stmt string) error {
	if t.markDone() {
		return sql.ErrTxDone
	}
	idle := false
	pc, err := t.pin.pgConn()
	if err == nil {
		idle, err = pgEnd(t.ctx, pc, stmt)
	}
	if idle {
		t.pin.giveBack()
	} else {
		t.pin.destroy()
	}
	t.cancel()
	return err
}

// pgEnd sends stmt (COMMIT or ROLLBACK) on pc and reports whether the
// server then says the connection is idle outside any transaction.
func pgEnd(ctx context.Context, pc *pgconn.PgConn, stmt string) (idle bool, err error) {
	mrr := pc.Exec(ctx, stmt)
	results, rolledBack := 0, false
	for mrr.NextResult() {
		tag, _ := mrr.ResultReader().Close()
		results++
		rolledBack = tag.String() == "ROLLBACK"
	}
	err = mrr.Close()
	idle = err == nil && pc.TxStatus() == 'I'
	if err != nil {
		return idle, err
	}
	if stmt == "COMMIT" && results == 1 && rolledBack {
		return idle, pgx.ErrTxCommitRollback
	}
	return idle, nil
}
