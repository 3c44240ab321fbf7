package lockproto

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"
	"weak"

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
//     there is busy for its other callers. A key is there under the one
//     identity of its server lock, whichever path names it (lockItem.local;
//     MySQL/MariaDB: MySQLLockIdentity).
//   - A wait is a try-lock repeated with a backoff that starts at
//     sharedRetryMin and doubles up to the keepalive, never a server-side
//     wait, which would stall the connection's other locks. Such a waiter
//     is not queued: a waiter on a dedicated connection, queued on the
//     server, takes the lock the moment it is freed, so one that mixes
//     the two for a key starves the shared ones: docs/PROTOCOL.md (Shared
//     lock connections).
//   - Turns: a statement waits for the connection (c.sem) only as long as
//     its caller's context allows (a try: the caller's context; a release:
//     its release context, cut endGrace after the caller's ended). A
//     release that cannot have its turn in time destroys the connection,
//     which frees its lock, and cancels its other holders with
//     errs.ErrLockLost: the cost of sharing a connection whose server
//     stopped answering.
//   - Keepalive: one "SELECT 1" per connection per interval, the shortest
//     of its holders' own (the opener's while none holds), recomputed
//     whenever a holder joins or leaves. Any statement that succeeds on the
//     connection counts as a check. A statement is given sharedTryTimeout
//     of that interval; one that takes longer (a server that stopped
//     answering) is cut and the connection counts as dead. So a holder
//     learns of a killed connection within two of its own intervals, and
//     of a frozen server within its interval + max(2×interval, 2 s).
//     Session-level locks end only with their connection, so a live
//     connection holds every lock it took. When a check or any statement
//     on it fails, the connection is destroyed and every Session it
//     carried is cancelled with cause errs.ErrLockLost.
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
	grow  chan struct{} // 1-buffered: held while a connection is added
	mu    sync.Mutex
	conns []*sharedConn
	held  map[any]int // keys held (or being taken) in this process: -1 exclusive, n > 0 by n shared holders
}

type sharedConn struct {
	conn  *sql.Conn
	pid   uint32            // PostgreSQL: its backend's pid (a fencing token's issuance checks it holds the lock)
	sem   chan struct{}     // 1-buffered: held by the one statement running on conn
	prev  int64             // MySQL: wait_timeout to restore (MySQLKeepSession)
	vars  mysqlLockConnVars // MySQL: its session's @@autocommit, read once when opened
	named bool              // PostgreSQL: application_name set to an owner
	stop  chan struct{}     // closed when c is destroyed or closed
	wake  chan struct{}     // 1-buffered: the keepalive looks again (holders changed, a statement began or ended)
	every time.Duration     // the keepalive it was opened with
	most  time.Duration     // MySQL: the longest interval its wait_timeout allows; 0: no bound

	users    int                       // Sessions using it, taking or holding; pool.mu
	held     map[*sharedHold]time.Time // Sessions holding a lock on it; pool.mu
	interval time.Duration             // the keepalive interval (see setInterval); pool.mu
	dead     bool                      // pool.mu

	smu   sync.Mutex
	since time.Time          // when the statement under way began; zero: none; smu
	abort context.CancelFunc // cuts the statement under way; smu
	alive time.Time          // when the last statement on conn succeeded, or conn was opened; smu
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
	p, loaded := sharedPools.LoadOrStore(wp, &sharedPool{grow: make(chan struct{}, 1), held: map[any]int{}})
	if !loaded {
		runtime.AddCleanup(db, func(wp weak.Pointer[sql.DB]) { sharedPools.Delete(wp) }, wp)
	}
	return p.(*sharedPool)
}

// errSharedConnDead is a statement's error on a shared connection that
// was destroyed meanwhile.
var errSharedConnDead = fmt.Errorf("%w: the shared lock connection failed", ErrNotHeld)

// errNoTurn is the error of a statement that could not have its turn on a
// shared connection before its wait ended: it never reached the server.
var errNoTurn = errors.New("the shared lock connection stayed busy with another statement until the wait ended")

// run runs f alone on c: it waits for c's turn for as long as wait allows
// (errNoTurn when it ends first), then calls f with a context of base's
// that c cuts when it gives up on the connection (a statement that took
// too long, a connection destroyed).
func (c *sharedConn) run(wait, base context.Context, f func(ctx context.Context) error) error {
	if err := c.take(wait); err != nil {
		return err
	}
	sctx, end := c.begin(base)
	err := f(sctx)
	return end(err)
}

// take waits for c's turn until wait ends or c is destroyed.
func (c *sharedConn) take(wait context.Context) error {
	if wait.Err() != nil {
		return errNoTurn
	}
	select {
	case c.sem <- struct{}{}:
		return nil
	default:
	}
	select {
	case c.sem <- struct{}{}:
		return nil
	case <-c.stop:
		return errSharedConnDead
	case <-wait.Done():
		return errNoTurn
	}
}

// begin starts a statement on c, whose turn the caller has: it returns the
// statement's context (base's, cut when c gives up on the connection) and
// the function that ends the statement with its error and gives the turn
// back. A statement that c cut reports so.
func (c *sharedConn) begin(base context.Context) (context.Context, func(error) error) {
	sctx, abort := context.WithCancelCause(base)
	c.smu.Lock()
	c.since = time.Now()
	c.abort = func() { abort(errSharedConnDead) }
	c.smu.Unlock()
	c.poke()
	return sctx, func(err error) error {
		c.smu.Lock()
		c.since, c.abort = time.Time{}, nil
		if err == nil {
			c.alive = time.Now()
		}
		c.smu.Unlock()
		if err != nil && errors.Is(context.Cause(sctx), errSharedConnDead) {
			// the driver reports a cancelled statement as the context's
			// error, which is not the caller's
			err = fmt.Errorf("%w (%v)", errSharedConnDead, err)
		}
		abort(nil)
		<-c.sem
		c.poke()
		return err
	}
}

// cut cuts the statement under way on c, if any.
func (c *sharedConn) cut() {
	c.smu.Lock()
	if c.abort != nil {
		c.abort()
	}
	c.smu.Unlock()
}

// poke makes c's keepalive look again at its holders and its statement.
func (c *sharedConn) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// pick returns the connection of p with the fewest users, adding one while
// there are fewer than o's limit, and counts a use of it.
func (p *sharedPool) pick(ctx context.Context, db *sql.DB, o *Op) (*sharedConn, error) {
	if c := p.least(o.Cfg.SharedConns); c != nil {
		return c, nil
	}
	select { // another caller is adding one: wait for it as ctx allows
	case p.grow <- struct{}{}:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	defer func() { <-p.grow }()
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
	c := &sharedConn{
		conn: conn, sem: make(chan struct{}, 1), stop: make(chan struct{}), wake: make(chan struct{}, 1),
		every: o.Cfg.Keepalive, interval: o.Cfg.Keepalive, held: map[*sharedHold]time.Time{}, alive: time.Now(),
	}
	if err := o.target.mech.openShared(ctx, o, c); err != nil {
		Destroy(conn)
		return nil, err
	}
	return c, nil
}

// openShared on PostgreSQL: only a direct connection (see above), named
// after its opener's owner.
func (pgAdvisory) openShared(ctx context.Context, o *Op, c *sharedConn) error {
	var err error
	c.pid, err = pgDirect(ctx, c.conn)
	if err == nil && o.Cfg.Owner != "" {
		// the connection's name is its opener's owner; RESET gives
		// back the one it started with before it goes back to the pool
		_, err = c.conn.ExecContext(ctx, strings.Replace(pgOwnerSQL(o.Cfg.Owner), "SET LOCAL ", "SET ", 1))
		c.named = err == nil
	}
	return err
}

// openShared on MySQL/MariaDB: the connection's wait_timeout raised.
func (mysqlNamed) openShared(ctx context.Context, o *Op, c *sharedConn) error {
	var err error
	c.prev, err = MySQLKeepSession(ctx, c.conn, 10*o.Cfg.Keepalive)
	// wait_timeout is now at least 10 intervals and a minute: an
	// interval up to a tenth of that keeps the session alive
	c.most = max(o.Cfg.Keepalive, 6*time.Second)
	if err == nil {
		// a fencing token's INSERT is committed explicitly only where
		// the session does not autocommit (fence.go)
		err = c.conn.QueryRowContext(ctx, "SELECT @@autocommit").Scan(&c.vars.autocommit)
		err = errs.Wrap(err, "read @@autocommit of a shared lock connection")
	}
	return err
}

// pgDirect returns conn's backend pid when conn reaches its PostgreSQL
// backend without a pooler in between, else an error wrapping
// errs.ErrUnsupportedDialect.
func pgDirect(ctx context.Context, conn *sql.Conn) (uint32, error) {
	var announced uint32
	if withWire(conn, func(w PgWire) error { announced = w.PID(); return nil }) != nil {
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
