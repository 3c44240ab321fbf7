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
	"github.com/ormlock/ormlock/internal/verbs"
)

// The binding (see the package doc, How it reaches the protocol): the pool
// itself for the lock connection of Transaction, Session and Lead
// (verbs.Pool.Pgx), and for everything else a *sql.DB over the pool
// through pgx's own database/sql driver (stdlib.OpenDBFromPool), opened
// for one call and closed when it returns: every connection it opens is a
// connection acquired from the pool, and closing it releases that
// connection to the pool, which destroys it if it is not idle outside any
// transaction. What the protocol learns of the server once per pool
// (whether its locks are real) is cached under a stand-in *sql.DB kept
// for the pool's lifetime.

// poolKeys holds, per pool, the *sql.DB under which the protocol caches what
// it learned of the pool's server (weakly: a pool that is garbage collected
// leaves the map).
var poolKeys sync.Map // weak.Pointer[pgxpool.Pool] -> *sql.DB

// keyOf returns pool's stand-in *sql.DB (never opened: a cache key).
func keyOf(pool *pgxpool.Pool) *sql.DB {
	wp := weak.Make(pool)
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

// binder is pgxlock's binding of the verb core: the pool for the lock
// connection where the lock travels in one message, a *sql.DB over the pool
// for the call (closed when the verb returns; shared per pool by the
// Sessions and Leads of WithSharedLockConns), the pool's stand-in cache
// key, PostgreSQL, and fn's transaction a pgx.Tx over the locked one.
type binder struct{ pool *pgxpool.Pool }

func (b binder) Nil() string { return verbs.NilIf(b.pool == nil, "*pgxpool.Pool") }

func (b binder) Bind(_ context.Context, verb string, opts []config.Option) (verbs.Pool, error) {
	cfg := config.New(opts...)
	p := verbs.Pool{Pkg: pkg, CacheKey: keyOf(b.pool), Dialect: lockproto.Postgres, Cfg: cfg, SplitTx: splitTx, Mend: mend}
	switch {
	case cfg.SharedConns > 0 && (verb == "Session" || verb == "Lead"):
		p.DB, p.Close = sharedDB(b.pool)
	case verb == "Transaction" || verb == "Session" || verb == "Lead":
		// the lock connection comes from the pool itself; the *sql.DB is
		// opened only if the call needs it (a cold server check, fencing,
		// the split protocol, a set or a semaphore)
		p.Pgx, p.Lazy = b.pool, verbs.OpenLazily(b.pool, openDB)
	default:
		db := openDB(b.pool)
		p.DB, p.Close = db, func() { _ = db.Close() }
	}
	return p, nil
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
// them and closed when the last returns, so that pgxlock still keeps
// nothing between calls.
var (
	sharedMu  sync.Mutex
	sharedDBs = map[*pgxpool.Pool]*shared{} // only while in use
)

type shared struct {
	db    *sql.DB
	users int
}

// sharedDB returns pool's shared *sql.DB and the function that gives it
// back.
func sharedDB(pool *pgxpool.Pool) (*sql.DB, func()) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	s := sharedDBs[pool]
	if s == nil {
		s = &shared{db: openDB(pool)}
		sharedDBs[pool] = s
	}
	s.users++
	return s.db, func() {
		sharedMu.Lock()
		defer sharedMu.Unlock()
		if s.users--; s.users == 0 {
			delete(sharedDBs, pool)
			_ = s.db.Close()
		}
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
