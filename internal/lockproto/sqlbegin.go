package lockproto

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ormlock/ormlock/internal/errs"
)

// database/sql's own BEGIN with the lock in one message (sqllock's opt-in).
//
// A *sql.Tx can only be begun by database/sql, which sends BEGIN as a
// message of its own, so a caller that must hand fn a *sql.Tx (sqllock,
// GORM's PrepareStmt) pays a round trip more than the one-message path of
// onemsg.go: BEGIN, the lock, COMMIT. A pool opened on a connector wrapped
// by WrapConnector closes that gap on PostgreSQL with pgx: before asking
// database/sql for the transaction, the protocol arms the pinned
// connection with its lock message (armedConn.arm); database/sql's BeginTx
// then reaches the wrapper, which sends BEGIN and the lock together
// (pgLockMessage, or the prepared statement on a direct connection) and
// hands database/sql a transaction it ends itself with COMMIT or ROLLBACK
// on the same wire (wrappedTx). database/sql sees an ordinary driver
// transaction, fn an ordinary *sql.Tx. An unarmed BeginTx, and every other
// method, is the wrapped driver's own: the wrapper changes nothing else,
// and on a connection that is not pgx's (lib/pq, MySQL) nothing at all.

// WrapConnector returns a connector whose connections are c's, able to
// send the BEGIN database/sql asks for together with the protocol's lock
// (see above). Closing the pool closes c when c is an io.Closer.
func WrapConnector(c driver.Connector) driver.Connector {
	if _, ok := c.(*wrappedConnector); ok {
		return c
	}
	return &wrappedConnector{c: c, drv: &wrappedDriver{c.Driver()}}
}

// OpenWrapped is sql.Open on a wrapped connector (WrapConnector) of the
// driver registered as driverName, for dsn: its OpenConnector when it has
// one, else its Open.
func OpenWrapped(driverName, dsn string) (*sql.DB, error) {
	probe, err := sql.Open(driverName, dsn) // connects nothing
	if err != nil {
		return nil, err
	}
	drv := probe.Driver()
	_ = probe.Close()
	var c driver.Connector = dsnConnector{dsn, drv}
	if dc, ok := drv.(driver.DriverContext); ok {
		if c, err = dc.OpenConnector(dsn); err != nil {
			return nil, err
		}
	}
	return sql.OpenDB(WrapConnector(c)), nil
}

// dsnConnector is the connector of a driver without OpenConnector.
type dsnConnector struct {
	dsn string
	d   driver.Driver
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) { return c.d.Open(c.dsn) }
func (c dsnConnector) Driver() driver.Driver                        { return c.d }

type wrappedConnector struct {
	c   driver.Connector
	drv *wrappedDriver
}

func (w *wrappedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := w.c.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &armedConn{Conn: dc}, nil
}

func (w *wrappedConnector) Driver() driver.Driver { return w.drv }

// Close closes the wrapped connector when it is an io.Closer (database/sql
// calls it from DB.Close).
func (w *wrappedConnector) Close() error {
	if c, ok := w.c.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// wrappedDriver is the driver of a wrapped connector's pool: the wrapped
// one, whose type still tells the dialect (DialectOfDB).
type wrappedDriver struct{ d driver.Driver }

func (d *wrappedDriver) Open(name string) (driver.Conn, error) {
	dc, err := d.d.Open(name)
	if err != nil {
		return nil, err
	}
	return &armedConn{Conn: dc}, nil
}

// unwrapDriver is the driver under a wrapped connector's, else d.
func unwrapDriver(d driver.Driver) driver.Driver {
	if w, ok := d.(*wrappedDriver); ok {
		return w.d
	}
	return d
}

// wrappedPool reports whether db was opened on a wrapped connector (a
// type assertion: the protocol asks it on every sqllock call).
func wrappedPool(db *sql.DB) bool {
	if db == nil {
		return false
	}
	_, ok := db.Driver().(*wrappedDriver)
	return ok
}

// DriverConn returns the driver's own connection under dc, a connection as
// (*sql.Conn).Raw hands it: the wrapped one for a pool of WrapConnector,
// else dc.
func DriverConn(dc any) any {
	if c, ok := dc.(*armedConn); ok {
		return c.Conn
	}
	return dc
}

// armedConn is a connection of a wrapped connector. Its BeginTx sends the
// lock message with BEGIN when the protocol armed it; database/sql calls
// the connection's methods one at a time, so send needs no lock.
type armedConn struct {
	driver.Conn
	// send, when set, sends BEGIN and the lock on the connection's wire;
	// the next BeginTx runs it once, and ResetSession drops it
	send func(w PgWire) error
	// tx is the transaction the last armed BeginTx opened
	tx *wrappedTx
}

var (
	_ driver.ConnBeginTx        = (*armedConn)(nil)
	_ driver.ConnPrepareContext = (*armedConn)(nil)
	_ driver.ExecerContext      = (*armedConn)(nil)
	_ driver.QueryerContext     = (*armedConn)(nil)
	_ driver.Pinger             = (*armedConn)(nil)
	_ driver.NamedValueChecker  = (*armedConn)(nil)
	_ driver.SessionResetter    = (*armedConn)(nil)
	_ driver.Validator          = (*armedConn)(nil)
)

func (c *armedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if send := c.send; send != nil {
		c.send = nil
		return c.beginArmed(ctx, send)
	}
	if b, ok := c.Conn.(driver.ConnBeginTx); ok {
		return b.BeginTx(ctx, opts)
	}
	if opts.Isolation != driver.IsolationLevel(sql.LevelDefault) || opts.ReadOnly {
		return nil, errors.New("sql: driver does not support non-default isolation level or read-only transactions")
	}
	//lint:ignore SA1019 a driver without ConnBeginTx has no other way to begin
	return c.Conn.Begin()
}

// beginArmed sends the armed message. The transaction is database/sql's
// whenever the server reports one open after it, whatever the lock's
// answer (send keeps that for the protocol, which then commits or rolls
// back through database/sql); a connection left outside any transaction
// fails BeginTx, and a closed one is a bad connection.
func (c *armedConn) beginArmed(ctx context.Context, send func(w PgWire) error) (driver.Tx, error) {
	w, ok := pgDriver.Wire(c.Conn)
	if !ok {
		return nil, errNoOneMessage
	}
	err := send(w)
	switch {
	case w.IsClosed():
		return nil, errs.Join(driver.ErrBadConn, err)
	case w.TxStatus() == 'I':
		if err == nil {
			err = errors.New("ormlock: no transaction after BEGIN")
		}
		return nil, err
	}
	c.tx = &wrappedTx{ctx: ctx, w: w}
	return c.tx, nil
}

// wrappedTx is the transaction an armed BEGIN opened, ended on the same
// wire with its BeginTx's context, as pgx's driver ends its own. A
// connection the server does not report idle afterwards is a bad
// connection: database/sql closes it.
type wrappedTx struct {
	ctx context.Context
	w   PgWire
	// beforeRollback, when set, travels before ROLLBACK in its message,
	// its answer's first column read into seen (rollbackRefused's probe)
	beforeRollback string
	seen           *bool
	// beforeCommit, when set, travels before COMMIT in its message
	// (CommitWith)
	beforeCommit string
}

func (t *wrappedTx) Commit() error { return t.end(t.beforeCommit+"COMMIT", nil) }
func (t *wrappedTx) Rollback() error {
	if t.beforeRollback != "" {
		return t.end(t.beforeRollback+"ROLLBACK", t.seen)
	}
	return t.end("ROLLBACK", nil)
}

func (t *wrappedTx) end(stmt string, seen *bool) error {
	idle, err := pgEnd(t.ctx, t.w, stmt, seen)
	if err != nil && t.beforeCommit != "" && strings.HasSuffix(stmt, "COMMIT") && !t.w.IsClosed() {
		idle, err = endFailed(t.ctx, t.w, err) // CommitWith's statement failed
	}
	if err == nil && !idle {
		err = fmt.Errorf("ormlock: transaction status %q after %s: %w", t.w.TxStatus(), stmt, driver.ErrBadConn)
	}
	return err
}

// setSend arms conn with send, or with nil disarms it, and reports whether
// conn is a wrapped connector's connection of the registered driver
// (pgx's), whose BEGIN can carry the lock; only such a connection is
// armed.
func setSend(conn *sql.Conn, send func(w PgWire) error) bool {
	return conn.Raw(func(dc any) error {
		c, ok := dc.(*armedConn)
		if !ok {
			return errNoOneMessage
		}
		if _, ok := pgDriver.Wire(c.Conn); !ok {
			return errNoOneMessage
		}
		c.send = send
		return nil
	}) == nil
}

// beginArmed begins fn's transaction through database/sql on conn, a
// connection of a wrapped connector's pool, with the lock in BEGIN's
// message: the one-message protocol of lockOneMessage with a *sql.Tx (on a
// connection that is not pgx's under the wrapper, beginThenLock's). The
// snapshot level is returned as beginOneMessage does. On failure conn has
// been given back, after a ROLLBACK the server confirmed, or destroyed.
func beginArmed(ctx context.Context, o *Op, conn *sql.Conn, opts *sql.TxOptions, begin string) (*LockedTx, sql.IsolationLevel, error) {
	wantIso := !strings.Contains(begin, "ISOLATION")
	var (
		x       lockExchange
		sendErr error
		wait    time.Duration // attempt's, set before BEGIN is asked for
	)
	armed := setSend(conn, func(w PgWire) error {
		sendErr = x.lock(ctx, o, w, begin, forFn, wait, false, wantIso)
		return sendErr
	})
	if !armed {
		return pgMech.beginThenLock(ctx, o, conn, opts)
	}
	wait, bounded, err := attempt(ctx, o)
	if err != nil {
		setSend(conn, nil)
		_ = conn.Close() // nothing was sent
		return nil, sql.LevelDefault, err
	}
	tx, txCancel, berr := beginOn(ctx, o, conn, opts)
	setSend(conn, nil)
	if tx == nil {
		// BEGIN did not reach the server, or left no transaction, or
		// ctx ended as it came back (database/sql rolls it back): berr
		// is classified (beginOn)
		Destroy(conn)
		return nil, sql.LevelDefault, berr
	}
	ok, err := lockOutcome(ctx, &x, sendErr, wait)
	if err == nil && ok {
		lt := &LockedTx{Tx: tx, ctx: ctx, op: o, conn: conn, txCancel: txCancel}
		err = settle(ctx, o, true, bounded, nil)
		if level := x.rep.level; wantIso && level != sql.LevelDefault {
			// as beginOneMessage: the snapshot predates the lock
			_ = lt.Rollback()
			if o.then != nil {
				o.then.ran = false // rolled back with the transaction
			}
			return nil, level, nil
		}
		if o.then != nil && o.then.ran {
			o.then.wtx = armedTx(conn) // CommitWith's statement rides on its COMMIT
		}
		return lt, sql.LevelDefault, err
	}
	// as rollbackRefused: a semaphore refused cleanly asks about slot n+1
	// in its ROLLBACK's message
	var probe *slotProbe
	if err == nil && x.status == 'T' && o.target.anyOne() {
		var stmt string
		probe, stmt = refusedProbe(o)
		if wtx := armedTx(conn); wtx != nil {
			wtx.beforeRollback, wtx.seen = stmt, &probe.seen
		}
	}
	if withinGrace(ctx, txCancel, tx.Rollback) != nil {
		Destroy(conn)
	} else {
		_ = conn.Close()
	}
	o.reportProbe(ctx, probe)
	return nil, sql.LevelDefault, settle(ctx, o, false, bounded, err)
}

// lockOutcome reads a lock message's exchange x (its send error sendErr)
// as lockOneMessage does: whether the lock was taken, or the error that
// kept the call from knowing. A wait's lock_timeout, or a try that raised,
// is "held elsewhere"; a lock that came as ctx ended is given up (its
// transaction is rolled back by the caller).
func lockOutcome(ctx context.Context, x *lockExchange, sendErr error, wait time.Duration) (bool, error) {
	ok, err := x.rep.ok, sendErr
	if err != nil && lockRefused(err, wait > 0) {
		err = nil // lock_timeout expired, or the try raised (pgthen.go): held elsewhere
	}
	if err == nil && ok && x.status != 'T' && x.rep.thenErr == nil {
		// (a claim that failed after the lock was granted leaves the
		// transaction failed, for the ledger to report: pgthen.go)
		err = fmt.Errorf("transaction status %q after the lock", x.status)
	}
	if err != nil {
		return false, errs.Wrap(err, "BEGIN and pg_advisory_xact_lock")
	}
	if ok && ctx.Err() != nil {
		return false, ctx.Err()
	}
	return ok, nil
}

// armedTx is the transaction the last armed BEGIN opened on conn, nil when
// none.
func armedTx(conn *sql.Conn) *wrappedTx {
	var tx *wrappedTx
	_ = conn.Raw(func(dc any) error {
		if c, ok := dc.(*armedConn); ok {
			tx = c.tx
		}
		return nil
	})
	return tx
}
