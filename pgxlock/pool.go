package pgxlock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"weak"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/pgxdriver"
	"github.com/ormlock/ormlock/internal/verbs"
)

// The binding (see the package doc, How it reaches the protocol): the pool
// itself as the pool of lock connections (verbs.Pool.LockConns, through
// internal/pgxdriver), and a *sql.DB over the pool through pgx's own
// database/sql driver (stdlib.OpenDBFromPool), opened for one call only if
// the call needs database/sql and closed when it returns: every connection
// it opens is a connection acquired from the pool, and closing it releases
// that connection to the pool, which destroys it if it is not idle outside
// any transaction. Which of the two a call uses is the protocol's choice,
// per path (lockproto.Op.BeginLocked, Session): the binding is the same
// for every verb.
//
// What pgxlock keeps between calls is, per pool, the stand-in *sql.DB
// (never opened, no connection) under which the protocol caches what it
// learned of the pool's server (whether its locks are real), for the
// pool's life (weakly: a pool that is garbage collected leaves the map);
// and, only while Sessions or Leads with shared lock connections run on
// the pool, the *sql.DB they share (takeShared). No goroutine and no
// connection of its own.

// poolKeys holds, per pool, the *sql.DB under which the protocol caches what
// it learned of the pool's server (weakly: a pool that is garbage collected
// leaves the map).
var poolKeys sync.Map // weak.Pointer[pgxpool.Pool] -> *sql.DB

// keyOf returns pool's stand-in *sql.DB (never opened: a cache key).
func keyOf(pool *pgxpool.Pool) *sql.DB {
	wp := lockproto.WeakOf(pool) // no runtime lock per call (see WeakOf)
	if k, ok := poolKeys.Load(wp); ok {
		return k.(*sql.DB)
	}
	k, loaded := poolKeys.LoadOrStore(wp, new(sql.DB))
	if !loaded {
		runtime.AddCleanup(pool, func(wp weak.Pointer[pgxpool.Pool]) { poolKeys.Delete(wp) }, wp)
	}
	return k.(*sql.DB)
}

const pkg = "pgxlock"

// binder is pgxlock's binding of the verb core: the pool as the pool of
// lock connections, the *sql.DBs over it opened on first use (callDBs),
// the pool's stand-in cache key, PostgreSQL, and fn's transaction a pgx.Tx
// over the locked one.
type binder struct{ pool *pgxpool.Pool }

func (b binder) Nil() string { return verbs.NilIf(b.pool == nil, "*pgxpool.Pool") }

func (b binder) Bind(_ context.Context, _ string, opts []config.Option) (verbs.Pool, error) {
	return verbs.Pool{
		Pkg: pkg, CacheKey: keyOf(b.pool), Dialect: lockproto.Postgres, Cfg: config.New(opts...),
		SplitTx: splitTx, Mend: mend,
		LockConns: pgxdriver.Pool(b.pool), Lazy: &callDBs{pool: b.pool},
	}, nil
}

// callDBs is one call's *sql.DBs over the pool (lockproto.LazyDB), each opened
// the first time the protocol asks for it: the call's own (DB), closed when
// the call returns, and the pool's shared one (SharedDB), under which
// shared lock connections live, given back when the call returns.
type callDBs struct {
	pool   *pgxpool.Pool
	mu     sync.Mutex
	db     *sql.DB
	shared *shared // the pool's shared *sql.DB, once taken
}

func (c *callDBs) DB() *sql.DB {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.db == nil {
		c.db = openDB(c.pool)
	}
	return c.db
}

// SharedDB is the pool's *sql.DB of shared lock connections, taken for
// the call (lockproto's sharedDB).
func (c *callDBs) SharedDB() *sql.DB {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.shared == nil {
		c.shared = takeShared(c.pool)
	}
	return c.shared.db
}

func (c *callDBs) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.db != nil {
		_ = c.db.Close()
	}
	if c.shared != nil {
		giveShared(c.pool, c.shared)
	}
}

func (c *callDBs) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return c.DB().QueryContext(ctx, query, args...)
}

func (c *callDBs) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return c.DB().QueryRowContext(ctx, query, args...)
}

// openDB opens a *sql.DB over pool.
func openDB(pool *pgxpool.Pool) *sql.DB {
	db := stdlib.OpenDBFromPool(pool)
	// the pool bounds the connections; this makes the protocol's checks
	// for a pool of one connection see it
	db.SetMaxOpenConns(int(pool.Config().MaxConns))
	return db
}

// The Sessions and Leads that ask for shared lock connections
// (ormlock.WithSharedLockConns) must share one *sql.DB, under which the
// protocol keeps those connections: one per pool, opened by the first of
// them and closed when the last returns, so that pgxlock keeps no
// connection between calls.
var (
	sharedMu  sync.Mutex
	sharedDBs = map[*pgxpool.Pool]*shared{} // only while in use
)

type shared struct {
	db    *sql.DB
	users int
}

// takeShared returns pool's shared *sql.DB, which the caller gives back
// with giveShared.
func takeShared(pool *pgxpool.Pool) *shared {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	s := sharedDBs[pool]
	if s == nil {
		s = &shared{db: openDB(pool)}
		sharedDBs[pool] = s
	}
	s.users++
	return s
}

// giveShared gives s back: the last user closes it.
func giveShared(pool *pgxpool.Pool, s *shared) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if s.users--; s.users == 0 {
		delete(sharedDBs, pool)
		_ = s.db.Close()
	}
}

// notPostgres names a server that answered the connection in another
// protocol than PostgreSQL's (a MySQL/MariaDB server sends a handshake of
// its own first, whose first byte, its length, pgx reads as a message type:
// a known type it did not expect, or one it does not know, as MySQL 8's 74
// bytes, "J") with ormlock.ErrUnsupportedDialect; other errors are returned
// as they are.
func notPostgres(err error) error {
	if err == nil {
		return nil
	}
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) ||
		!strings.Contains(ce.Error(), "unexpected message") && !strings.Contains(ce.Error(), "unknown message type") {
		return err
	}
	return errs.Join(fmt.Errorf("%w: pgxlock is PostgreSQL only, and the server did not answer in PostgreSQL's protocol (a MySQL/MariaDB server takes sqllock)", ormlock.ErrUnsupportedDialect), err)
}
