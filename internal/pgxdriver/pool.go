package pgxdriver

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ormlock/ormlock/internal/lockproto"
)

// Pool returns p as the pool lock connections are pinned from
// (lockproto.Op.LockConns): pgxlock's pool-native lock connection, a
// *pgxpool.Conn driven by pgx with no database/sql layer.
func Pool(p *pgxpool.Pool) lockproto.LockConnPool { return pool{p} }

type pool struct{ p *pgxpool.Pool }

func (p pool) PinLock(ctx context.Context) (lockproto.LockConn, error) {
	c, err := p.p.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return lockConn{c}, nil
}

// lockConn is a connection acquired from a pgx pool.
type lockConn struct{ c *pgxpool.Conn }

func (l lockConn) Wire() lockproto.PgWire { return wire{l.c.Conn().PgConn()} }

func (l lockConn) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := l.c.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

// Release gives the connection back to the pool, which itself destroys a
// connection that is closed, busy or inside a transaction.
func (l lockConn) Release() { l.c.Release() }

// Destroy takes the connection out of the pool and closes it at once: an
// ended context makes pgconn close the socket without waiting on the
// server.
func (l lockConn) Destroy() {
	conn := l.c.Hijack()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = conn.Close(ctx)
}

// ConnOf returns the pgx connection under conn, a connection of pgx's
// database/sql driver pinned by the caller, which stays valid while conn is
// pinned; an error when conn is not one.
func ConnOf(conn *sql.Conn) (*pgx.Conn, error) {
	var pc *pgx.Conn
	err := conn.Raw(func(dc any) error {
		c, ok := lockproto.DriverConn(dc).(conner)
		if !ok {
			return errNotPgx
		}
		pc = c.Conn()
		return nil
	})
	return pc, err
}

var errNotPgx = errors.New("ormlock: not a pgx connection")

// TxConn returns the pgx connection lt runs on, for pgxlock, which hands fn
// pgx's own API on it: the connection of Pool's lock connection, or of the
// pinned *sql.Conn of pgx's driver (lockproto.LockedTx.Conn).
func TxConn(lt *lockproto.LockedTx) (*pgx.Conn, error) {
	sc, lc, err := lt.Conn()
	switch {
	case err != nil:
		return nil, err
	case lc != nil:
		l, ok := lc.(lockConn)
		if !ok {
			return nil, errNotPgx
		}
		return l.c.Conn(), nil
	}
	return ConnOf(sc)
}
