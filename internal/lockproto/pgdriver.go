package lockproto

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"

	"github.com/ormlock/ormlock/internal/errs"
)

// The PostgreSQL driver seam: what the protocol asks of a driver beyond
// database/sql, as interfaces the driver implements. One driver does
// today: pgx, whose package internal/pgxdriver implements them and
// registers itself (RegisterPgDriver) when it is linked; internal/verbs
// links it, so every adapter has it, and pgxlock also uses its pool
// (pgxdriver.Pool). This
// package imports no driver: without a registered one, every connection
// takes the paths any database/sql driver takes (BEGIN through
// database/sql, then the lock; no multiplexer probe; no shared lock
// connections on PostgreSQL).

// PgWire is a PostgreSQL connection the protocol drives itself, by
// messages of the simple query protocol: the lock message (onemsg.go,
// prepared.go) and the COMMIT or ROLLBACK of a OneMessageTx. It is valid
// while its connection stays pinned.
type PgWire interface {
	// Exec sends query, one simple-protocol message that may hold
	// several statements, and returns its reply, which the caller reads
	// to the end (PgReply.Close).
	Exec(ctx context.Context, query string) PgReply
	// TxStatus is the transaction status of the server's last
	// ReadyForQuery: 'I' idle, 'T' in a transaction, 'E' in a failed one.
	TxStatus() byte
	// IsClosed reports whether the connection is closed.
	IsClosed() bool
	// PID is the backend pid the connection announced at start-up (a
	// pooler's own key behind one: see prepared.go).
	PID() uint32
	// CustomData is a map kept with the connection for its life, nil
	// when the driver keeps none (pgConnStateOf).
	CustomData() map[string]any
	// CancelRequest asks the server to cancel the statement running on
	// the connection, on a connection of its own (stmtCtx).
	CancelRequest(ctx context.Context) error
}

// PgReply is the reply to one message (PgWire.Exec): its results in order,
// the rows of each as text.
type PgReply interface {
	// NextResult moves to the next result, false after the last one.
	NextResult() bool
	// NextRow moves to the current result's next row, false after its
	// last one.
	NextRow() bool
	// Values is the current row's columns, as the server sent them (nil
	// for NULL); valid until the next NextRow.
	Values() [][]byte
	// CloseResult reads the current result to its end and returns its
	// command tag ("ROLLBACK") or its error.
	CloseResult() (tag string, err error)
	// Close reads the reply to its end and returns its first error.
	Close() error
}

// LockConn is a lock connection pinned from a driver's own pool
// (LockConnPool), with no database/sql between the driver and the
// protocol: pgxlock's, from its *pgxpool.Pool.
type LockConn interface {
	// Wire is the connection, for the protocol's own messages.
	Wire() PgWire
	// Exec runs a statement with arguments on the connection (the
	// protocol's statements on a Session's lock transaction: the
	// keepalive, the owner) and returns the rows it affected.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	// Release gives the connection back to its pool, which destroys it
	// when it is closed, busy or inside a transaction.
	Release()
	// Destroy takes the connection out of its pool and closes it at
	// once: the server frees what it held when it sees the socket close.
	Destroy()
}

// LockConnPool is a pool that lock connections are pinned from directly
// (Op.LockConns): the protocol asks it only where the lock travels in one
// message on PostgreSQL, without shared lock connections, and where the
// caller gave no *sql.DB (poolNative).
type LockConnPool interface {
	// PinLock pins a connection, waiting no longer than ctx allows.
	PinLock(ctx context.Context) (LockConn, error)
}

// PgDriver is what the protocol asks of the PostgreSQL driver under
// database/sql beyond database/sql itself (RegisterPgDriver).
type PgDriver interface {
	// Wire returns the wire of dc, a connection of the driver as
	// (*sql.Conn).Raw hands it, or false when dc is not the driver's.
	Wire(dc any) (PgWire, bool)
	// ProbePIDs returns the backend pid conn announced at start-up and
	// the one a second connection, opened with conn's settings to the
	// server conn reached, announces (closed at once: the multiplexer
	// check, engines.go); an error when conn is not the driver's or the
	// second connection failed.
	ProbePIDs(ctx context.Context, conn *sql.Conn) (announced, second uint32, err error)
	// SessionEnded reports whether err is a server error of the driver
	// whose severity, FATAL or PANIC, means the server ended the session
	// after sending it.
	SessionEnded(err error) bool
	// ErrCommitRollback is the error the driver's transactions return
	// from a COMMIT that the server answered with ROLLBACK (the
	// transaction had failed); OneMessageTx returns it alike.
	ErrCommitRollback() error
}

// pgDriver is the registered PostgreSQL driver; noPgDriver until one
// registers.
var pgDriver PgDriver = noPgDriver{}

// RegisterPgDriver makes d the PostgreSQL driver the protocol asks (see
// PgDriver), in place of any before it. It is called from the driver
// package's init, before any lock is taken.
func RegisterPgDriver(d PgDriver) { pgDriver = d }

// noPgDriver is no driver: no connection is its.
type noPgDriver struct{}

// errCommitRollback stands for a driver's ErrCommitRollback when none is
// registered.
var errCommitRollback = errors.New("commit unexpectedly resulted in rollback")

func (noPgDriver) Wire(any) (PgWire, bool) { return nil, false }
func (noPgDriver) ProbePIDs(context.Context, *sql.Conn) (uint32, uint32, error) {
	return 0, 0, errNoOneMessage
}
func (noPgDriver) SessionEnded(error) bool  { return false }
func (noPgDriver) ErrCommitRollback() error { return errCommitRollback }

// withWire runs f on the wire of conn, a connection of the registered
// PostgreSQL driver (pgdriver.go), or returns errNoOneMessage.
func withWire(conn *sql.Conn, f func(w PgWire) error) error {
	return conn.Raw(func(dc any) error {
		w, ok := pgDriver.Wire(DriverConn(dc))
		if !ok {
			return errNoOneMessage
		}
		return f(w)
	})
}

// isPgx reports whether conn is a connection of the registered driver
// (pgx's), on which the lock can travel with BEGIN (lockOneMessage).
func isPgx(conn *sql.Conn) bool {
	return withWire(conn, func(PgWire) error { return nil }) == nil
}

// The connection a PostgreSQL lock is taken on: pinned from a *sql.DB
// (database/sql, any driver), or, for pgxlock, pinned from the driver's
// own pool (Op.LockConns: pgx's *pgxpool.Pool, through pgxdriver) with no
// database/sql layer. The one-message paths (this file, lockonlytx.go,
// Session) take either; everything else keeps its *sql.Conn.

// pinned is a connection pinned for one lock use.
type pinned interface {
	// wire is the connection's wire, or errNoOneMessage (not a
	// connection of the registered driver; nothing was sent); valid while
	// the connection is pinned.
	wire() (PgWire, error)
	// sqlConn is the *sql.Conn, nil for a connection of Op.LockConns.
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

func (p sqlPin) wire() (PgWire, error) {
	var w PgWire
	err := withWire(p.c, func(cw PgWire) error { w = cw; return nil })
	return w, err
}
func (p sqlPin) sqlConn() *sql.Conn { return p.c }
func (p sqlPin) giveBack()          { _ = p.c.Close() }
func (p sqlPin) destroy()           { Destroy(p.c) }

// poolPin is a connection pinned from Op.LockConns. Like a *sql.Conn's
// Close, its giveBack and destroy act once: the first of them (the end of
// the transaction that held the lock) decides, later calls do nothing.
type poolPin struct {
	c    LockConn
	done atomic.Bool
}

func (p *poolPin) wire() (PgWire, error) {
	if p.done.Load() {
		return nil, sql.ErrConnDone
	}
	return p.c.Wire(), nil
}

func (p *poolPin) sqlConn() *sql.Conn { return nil }

func (p *poolPin) giveBack() {
	if !p.done.Swap(true) {
		p.c.Release()
	}
}

func (p *poolPin) destroy() {
	if !p.done.Swap(true) {
		p.c.Destroy()
	}
}

// lockConnOf is the LockConn under p, nil when p is not one of
// Op.LockConns.
func lockConnOf(p pinned) LockConn {
	if pp, ok := p.(*poolPin); ok {
		return pp.c
	}
	return nil
}

// pinLock pins the connection o's lock is taken on, waiting no longer than
// ctx allows: from o.LockConns when native (poolNative), else from db
// (pin).
func pinLock(ctx context.Context, o *Op, db *sql.DB, native bool) (pinned, error) {
	if !native {
		c, err := pinXact(ctx, o, db)
		if err != nil {
			return nil, err
		}
		return sqlPin{c}, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, notAcquired(ctx, o, err)
	}
	c, err := o.LockConns.PinLock(ctx)
	if err != nil {
		return nil, failed(ctx, o, errs.Wrap(err, "pin a connection"))
	}
	return &poolPin{c: c}, nil
}

// oneMessageOn reports whether the lock can travel with BEGIN on conn:
// a connection of Op.LockConns, or a *sql.Conn of the registered driver
// (isPgx).
func oneMessageOn(conn pinned) bool {
	sc := conn.sqlConn()
	return sc == nil || isPgx(sc)
}

// poolNative reports whether o's lock connection comes from o.LockConns:
// the caller gave no *sql.DB (a path whose statements need database/sql,
// such as RunOnce's ledger, gives one), o has a LockConnPool, the target
// travels in one message, and there are no shared lock connections (which
// live under a *sql.DB).
func poolNative(o *Op, db *sql.DB) bool {
	return db == nil && o.LockConns != nil && o.target.oneMessage() && o.Cfg.SharedConns == 0
}

// Conn returns the connection the transaction runs on, for an adapter
// that hands fn its driver's own API on it (pgxlock, through
// pgxdriver.TxConn): the pinned *sql.Conn, or the LockConn pinned from
// Op.LockConns. A transaction whose connection the protocol does not hold
// (the split protocol's, begun by db.BeginTx or Op.SplitTx) gives an
// error: the adapter knows it itself.
func (t *LockedTx) Conn() (*sql.Conn, LockConn, error) {
	switch {
	case t.conn != nil:
		return t.conn, nil, nil
	case t.Tx != nil:
		if ct, ok := t.Tx.(*OneMessageTx); ok {
			if lc := lockConnOf(ct.pin); lc != nil {
				return nil, lc, nil
			}
			return ct.conn, nil, nil
		}
	}
	return nil, nil, errors.New("ormlock: the transaction's connection is not held by the protocol")
}

// pgCancelOf returns the CancelRequest of conn's pgx connection (see
// stmtCtx), nil when conn is not pgx's. The caller keeps conn pinned while
// it may call it.
func pgCancelOf(conn *sql.Conn) serverCancel { return pinCancel(sqlPin{conn}) }

// pinCancel is pgCancelOf for a pinned connection of either kind.
func pinCancel(conn pinned) serverCancel {
	w, err := conn.wire()
	if err != nil {
		return nil
	}
	return w.CancelRequest
}
