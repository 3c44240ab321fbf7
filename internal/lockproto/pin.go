package lockproto

import (
	"context"
	"database/sql"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ormlock/ormlock/internal/errs"
)

// The connection a PostgreSQL lock is taken on: pinned from a *sql.DB
// (database/sql, any driver), or, for pgxlock, acquired from the
// *pgxpool.Pool itself and driven by pgx with no database/sql layer
// (Op.Pgx). The one-message paths (onemsg.go, onemsgtx.go, lockonlytx.go,
// Session) take either; everything else keeps its *sql.Conn.

// pinned is a connection pinned for one lock use.
type pinned interface {
	// withPg runs f on the connection's pgconn, or returns
	// errNoOneMessage (not a pgx connection; nothing was sent).
	withPg(f func(pc *pgconn.PgConn) error) error
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

func (p sqlPin) withPg(f func(pc *pgconn.PgConn) error) error { return withPgConn(p.c, f) }
func (p sqlPin) sqlConn() *sql.Conn                           { return p.c }
func (p sqlPin) giveBack()                                    { _ = p.c.Close() }
func (p sqlPin) destroy()                                     { Destroy(p.c) }

// pgxPin is a connection acquired from a pgx pool. Like a *sql.Conn's
// Close, its giveBack and destroy act once: the first of them (the end of
// the transaction that held the lock) decides, later calls do nothing.
type pgxPin struct {
	c    *pgxpool.Conn
	done atomic.Bool
}

func (p *pgxPin) withPg(f func(pc *pgconn.PgConn) error) error {
	if p.done.Load() {
		return sql.ErrConnDone
	}
	return f(p.c.Conn().PgConn())
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

// pinPgx acquires a connection from o.Pgx, waiting no longer than ctx
// allows; a failure is classified as pin's.
func (o *Op) pinPgx(ctx context.Context) (pinned, error) {
	if err := ctx.Err(); err != nil {
		return nil, o.notAcquired(ctx, err)
	}
	c, err := o.Pgx.Acquire(ctx)
	if err != nil {
		return nil, o.failed(ctx, errs.Wrap(err, "pin a connection"))
	}
	return &pgxPin{c: c}, nil
}

// pgxNative reports whether o's lock connection comes from o.Pgx, driven
// by pgx itself: PostgreSQL, a target that travels in one message, and no
// shared lock connections (which live under the *sql.DB).
func (o *Op) pgxNative() bool {
	return o.Pgx != nil && o.Dialect == Postgres && o.target.oneMessage() && o.Cfg.SharedConns == 0
}

// sqlDB is db, or when db is nil the *sql.DB o.OpenDB opens (pgxlock's
// Transaction, Session and Lead are given none: their lock connection
// comes from o.Pgx, and only the paths that need database/sql open it).
func (o *Op) sqlDB(db *sql.DB) *sql.DB {
	if db == nil && o.OpenDB != nil {
		return o.OpenDB()
	}
	return db
}
