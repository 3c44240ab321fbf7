package lockproto

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
)

// Shared lock connections (ormlock.WithSharedLockConns(n)): the Sessions
// and Leads of one process that ask for it hold their locks on at most n
// connections pinned from their pool, instead of one connection each.
//
//   - The lock is session-level: PostgreSQL's pg_try_advisory_lock(key) /
//     pg_advisory_unlock(key), MySQL/MariaDB's GET_LOCK(name, 0) /
//     RELEASE_LOCK(name) (several named locks per connection). Each is one
//     round trip on the shared connection, whose statements take turns.
//     Both servers let a connection take a lock it holds again, so the
//     process also keeps the set of keys it holds per pool, and a key held
//     there is busy for its other callers.
//   - A wait is a try-lock repeated with a backoff that starts at
//     sharedRetryMin and doubles up to the keepalive, never a server-side
//     wait, which would stall the connection's other locks.
//   - Keepalive: one "SELECT 1" per connection per interval (the shortest
//     of its Sessions'), bounded by sharedTryTimeout. Session-level locks
//     end only with their connection, so a live connection holds every
//     lock it took. When a check or any statement on it fails, the
//     connection is destroyed and every Session it carried is cancelled
//     with cause errs.ErrLockLost.
//   - A connection whose last Session ended goes back to the pool (MySQL:
//     its wait_timeout set back first).
//   - PostgreSQL behind a transaction-mode pooler has no session-level
//     locks (the pooler hands the server connection to other clients
//     between statements, locks included): a shared connection is used
//     only once its backend's pg_backend_pid() is the pid the server
//     announced when the connection started, which a pooler's own pid never
//     is; otherwise errs.ErrUnsupportedDialect, before anything is taken.
//     Telling the two apart needs the pgx driver.
//   - Owner (ormlock.WithOwner): on PostgreSQL the shared connection's
//     application_name is the owner of the Session that opened it (SET, and
//     RESET before it goes back to the pool), so one process should use
//     one owner; on MySQL/MariaDB a Lead writes its row as on a connection
//     of its own (owner.go).

// sharedRetryMin is the first pause of a shared connection's wait.
const sharedRetryMin = 10 * time.Millisecond

// sharedPools maps a pool to its shared lock connections.
var sharedPools sync.Map // weak.Pointer[sql.DB] -> *sharedPool

type sharedPool struct {
	grow  sync.Mutex // held while a connection is added
	mu    sync.Mutex
	conns []*sharedConn
	held  map[any]bool // keys held (or being taken) in this process
}

type sharedConn struct {
	conn  *sql.Conn
	pid   uint32            // PostgreSQL: its backend's pid (a fencing token's issuance checks it holds the lock)
	stmt  sync.Mutex        // one statement at a time
	prev  int64             // MySQL: wait_timeout to restore (MySQLKeepSession)
	vars  mysqlLockConnVars // MySQL: its session's @@autocommit, read once when opened
	named bool              // PostgreSQL: application_name set to an owner
	stop  chan struct{}
	every time.Duration             // the keepalive it was opened with: its wait_timeout allows it
	users int                       // Sessions using it, taking or holding; pool.mu
	held  map[*sharedHold]time.Time // Sessions holding a lock on it; pool.mu
	dead  bool                      // pool.mu
}

// sharedHold is one Session's lock on a shared connection.
type sharedHold struct {
	op     *Op
	ctx    context.Context // the caller's, for the observer
	every  time.Duration
	cancel context.CancelCauseFunc
	lost   error // pool.mu
}

func sharedPoolOf(db *sql.DB) *sharedPool {
	wp := weak.Make(db)
	if p, ok := sharedPools.Load(wp); ok {
		return p.(*sharedPool)
	}
	p, loaded := sharedPools.LoadOrStore(wp, &sharedPool{held: map[any]bool{}})
	if !loaded {
		runtime.AddCleanup(db, func(wp weak.Pointer[sql.DB]) { sharedPools.Delete(wp) }, wp)
	}
	return p.(*sharedPool)
}

// run runs f alone on c.
func (c *sharedConn) run(f func() error) error {
	c.stmt.Lock()
	defer c.stmt.Unlock()
	return f()
}

// pick returns the connection of p with the fewest users, adding one while
// there are fewer than o's limit, and counts a use of it.
func (p *sharedPool) pick(ctx context.Context, db *sql.DB, o *Op) (*sharedConn, error) {
	if c := p.least(o.Cfg.SharedConns); c != nil {
		return c, nil
	}
	p.grow.Lock()
	defer p.grow.Unlock()
	if c := p.least(o.Cfg.SharedConns); c != nil { // another caller added one
		return c, nil
	}
	c, err := o.openShared(ctx, db)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	c.users++
	p.conns = append(p.conns, c)
	p.mu.Unlock()
	go p.keepalive(c)
	return c, nil
}

// least counts a use of p's least used connection and returns it, or nil
// when a connection should be added: none is idle and fewer than limit
// exist.
func (p *sharedPool) least(limit int) *sharedConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best *sharedConn
	for _, c := range p.conns {
		if best == nil || c.users < best.users {
			best = c
		}
	}
	if best == nil || (best.users > 0 && len(p.conns) < limit) {
		return nil
	}
	best.users++
	return best
}

// openShared pins a connection for shared locks: on PostgreSQL only a
// direct one (see above); on MySQL/MariaDB with its wait_timeout raised.
func (o *Op) openShared(ctx context.Context, db *sql.DB) (*sharedConn, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, errs.Wrap(err, "pin a shared lock connection")
	}
	c := &sharedConn{conn: conn, stop: make(chan struct{}), every: o.Cfg.Keepalive, held: map[*sharedHold]time.Time{}}
	if o.Dialect == Postgres {
		c.pid, err = pgDirect(ctx, conn)
		if err == nil && o.Cfg.Owner != "" {
			// the connection's name is its opener's owner; RESET gives
			// back the one it started with before it goes back to the pool
			_, err = conn.ExecContext(ctx, strings.Replace(pgOwnerSQL(o.Cfg.Owner), "SET LOCAL ", "SET ", 1))
			c.named = err == nil
		}
	} else {
		c.prev, err = MySQLKeepSession(ctx, conn, 10*o.Cfg.Keepalive)
		if err == nil {
			// a fencing token's INSERT is committed explicitly only where
			// the session does not autocommit (fence.go)
			err = conn.QueryRowContext(ctx, "SELECT @@autocommit").Scan(&c.vars.autocommit)
			err = errs.Wrap(err, "read @@autocommit of a shared lock connection")
		}
	}
	if err != nil {
		Destroy(conn)
		return nil, err
	}
	return c, nil
}

// pgDirect returns conn's backend pid when conn reaches its PostgreSQL
// backend without a pooler in between, else an error wrapping
// errs.ErrUnsupportedDialect.
func pgDirect(ctx context.Context, conn *sql.Conn) (uint32, error) {
	var announced uint32
	if withPgConn(conn, func(pc *pgconn.PgConn) error { announced = pc.PID(); return nil }) != nil {
		return 0, fmt.Errorf("%w: WithSharedLockConns on PostgreSQL needs the pgx driver, which tells a direct connection from a transaction-mode pooler's", errs.ErrUnsupportedDialect)
	}
	var pid int64
	if err := conn.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return 0, errs.Wrap(err, "read pg_backend_pid() of a shared lock connection")
	}
	if pid != int64(announced) {
		return 0, fmt.Errorf("%w: WithSharedLockConns needs session-level advisory locks, which a transaction-mode pooler (PgBouncer) would hand to its other clients: this connection's backend pid %d is not the pid %d it was announced with, so a pooler is in between", errs.ErrUnsupportedDialect, pid, announced)
	}
	return announced, nil
}

// keepalive checks c every interval (the shortest of its holders' and of
// the one it was opened with, which its MySQL wait_timeout was raised for)
// until c is closed or dies.
func (p *sharedPool) keepalive(c *sharedConn) {
	for {
		p.mu.Lock()
		every := c.every
		for h := range c.held {
			every = min(every, h.every)
		}
		p.mu.Unlock()
		t := time.NewTimer(every)
		select {
		case <-c.stop:
			t.Stop()
			return
		case <-t.C:
		}
		err := c.run(func() error {
			ctx, cancel := context.WithTimeout(context.Background(), sharedTryTimeout(every))
			defer cancel()
			return PGPing(ctx, c.conn)
		})
		if err != nil {
			p.kill(c, err, nil)
			return
		}
	}
}

// kill destroys c after a failed statement (err): every Session it
// carried, but (whose release failed and reports it itself), is cancelled
// with cause ErrLockLost, its observer told.
func (p *sharedPool) kill(c *sharedConn, err error, but *sharedHold) {
	p.mu.Lock()
	if c.dead {
		p.mu.Unlock()
		return
	}
	c.dead = true
	close(c.stop)
	p.drop(c)
	var lost []*sharedHold
	for h := range c.held {
		if h != but {
			h.lost = err
			lost = append(lost, h)
		}
	}
	p.mu.Unlock()
	for _, h := range lost {
		// fn hears of the loss first; then the observer
		h.cancel(errs.ErrLockLost)
		h.op.Emit(h.ctx, config.EventLockLost, err)
	}
	go func() { // a statement of c still running (a wait's try) ends first
		c.stmt.Lock()
		Destroy(c.conn)
		c.stmt.Unlock()
	}()
}

// drop removes c from p's connections; p.mu is held.
func (p *sharedPool) drop(c *sharedConn) {
	for i, x := range p.conns {
		if x == c {
			p.conns = append(p.conns[:i], p.conns[i+1:]...)
			return
		}
	}
}

func (p *sharedPool) unreserve(k any) {
	p.mu.Lock()
	delete(p.held, k)
	p.mu.Unlock()
}

// leave ends a use of c (a try or a hold of key k): k is free again in this
// process, and c, once nobody uses it, goes back to the pool.
func (p *sharedPool) leave(c *sharedConn, k any) {
	p.mu.Lock()
	delete(p.held, k)
	c.users--
	idle := c.users == 0 && !c.dead
	if idle {
		c.dead = true // closed: no longer picked
		close(c.stop)
		p.drop(c)
	}
	p.mu.Unlock()
	if !idle {
		return
	}
	c.stmt.Lock()
	defer c.stmt.Unlock()
	rctx, cancel := releaseCtx(context.Background())
	defer cancel()
	var err error
	if c.named {
		_, err = c.conn.ExecContext(rctx, "RESET application_name")
	} else {
		err = MySQLRestoreSession(rctx, c.conn, c.prev)
	}
	if err != nil {
		Destroy(c.conn)
		return
	}
	_ = c.conn.Close()
}
