package lockproto

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
)

// Mechanism is the kind of server lock a Target is taken with: today
// PostgreSQL's advisory locks (pgAdvisory, transaction and session level)
// and MySQL/MariaDB's named locks (mysqlNamed, GET_LOCK). It renders a
// target's items (one key, the keys of a set, a shared key, a semaphore's
// slots) into the statements that try, wait for, release, check and list
// them, and declares what it supports; the protocol asks it and compares
// no dialect. mechanismFor is the one place that chooses it.
//
// A new mechanism (a lease table, say) implements this interface: its
// items' resolution and canonical order, the statements of its session
// lock (try, release, keepalive), its Transaction (beginLocked) and its
// Session hold, and answers the capabilities below; the protocol's paths
// that a capability it lacks would take are then refused or skipped.
type Mechanism interface {
	// Name names the mechanism in messages.
	Name() string
	// SharedMode reports whether a key can be held in share mode
	// (keys.Shared).
	SharedMode() bool
	// ServerWait reports whether the server waits for a held lock on the
	// caller's behalf (a lock statement with a timeout), rather than the
	// client retrying tries.
	ServerWait() bool
	// SessionLevel reports whether a lock can be held by a connection
	// beyond one transaction (Session, shared lock connections).
	SessionLevel() bool
	// XactLevel reports whether a lock can be held by a transaction and
	// given back by its end, which is what lets a savepoint of the caller's
	// transaction hold it (a nested call).
	XactLevel() bool
	// OneMessage reports whether BEGIN and the lock of one key travel in
	// one message (onemsg.go).
	OneMessage() bool

	// resolve is the server lock of k in namespace ns.
	resolve(k keys.Key, ns string) lockItem
	// compare orders two server locks in a set's canonical order (0: one
	// server lock).
	compare(a, b lockItem) int
	// serverName is it as the server names it, for messages.
	serverName(it lockItem) string
	// local is the one identity of it in the process's reservation table.
	local(it lockItem) localLock

	// beginLocked is BeginLocked's protocol: the lock and fn's transaction.
	beginLocked(ctx context.Context, o *Op, db *sql.DB, opts *sql.TxOptions) (*LockedTx, error)
	// hold takes o's lock on the pinned connection conn for a Session and
	// returns how to check and release it.
	hold(ctx context.Context, o *Op, db *sql.DB, conn pinned) (*sessionHold, error)
	// openShared readies c, whose connection conn was just pinned, to hold
	// session-level locks of several callers (sharedconn.go).
	openShared(ctx context.Context, o *Op, c *sharedConn) error
	// tryKey tries o's one exclusive key at session level on conn.
	tryKey(ctx context.Context, o *Op, conn *sql.Conn) (bool, error)
	// unlockKey releases o's one exclusive key's session-level lock on q.
	unlockKey(ctx context.Context, o *Op, q Querier) error
	// tryItem tries item it at session level on q (with probe: also asks
	// whether probe's lock is held).
	tryItem(ctx context.Context, q Querier, it lockItem, probe *slotProbe) (bool, error)
	// unlockItem releases item it's session-level lock on q.
	unlockItem(ctx context.Context, q Querier, it lockItem) error
	// sharedToken issues the fencing token of o's lock held on c.
	sharedToken(ctx context.Context, o *Op, db *sql.DB, c *sharedConn) error
}

// The mechanisms, and the mechanism of each dialect (mechanismFor).
var (
	pgMech     pgAdvisory
	mysqlMech  mysqlNamed
	mechanisms = map[Dialect]Mechanism{Postgres: pgMech, MySQL: mysqlMech}
)

// mechanismFor is the lock mechanism of dialect d: advisory locks on
// PostgreSQL, named locks on MySQL/MariaDB; with lease (ormlock.WithLease),
// the lease table's rows on either (lease.go).
func mechanismFor(d Dialect, lease bool) (Mechanism, error) {
	ms := mechanisms
	if lease {
		ms = leaseMechs
	}
	m, ok := ms[d]
	if !ok {
		return nil, fmt.Errorf("%w: dialect %d", errs.ErrUnsupportedDialect, d)
	}
	return m, nil
}

// plainItem is the item of k before its mechanism resolves it: the plain
// key (a shape's mode and slot count taken off) and its mode. A plain key,
// every fast path's, is itself.
func plainItem(k keys.Key) lockItem {
	if !keys.IsShape(k) {
		return lockItem{key: k}
	}
	return lockItem{key: keys.Plain(k), shared: keys.IsShared(k)}
}

// pgAdvisory is PostgreSQL's advisory locks: transaction level for a
// Transaction (pg_advisory_xact_lock and its forms), session level on a
// shared lock connection.
type pgAdvisory struct{}

func (pgAdvisory) Name() string       { return "PostgreSQL advisory lock" }
func (pgAdvisory) SharedMode() bool   { return true }
func (pgAdvisory) ServerWait() bool   { return true }
func (pgAdvisory) SessionLevel() bool { return true }
func (pgAdvisory) XactLevel() bool    { return true }
func (pgAdvisory) OneMessage() bool   { return true }

func (pgAdvisory) resolve(k keys.Key, ns string) lockItem {
	it := plainItem(k)
	it.pg = keys.Postgres(it.key, ns)
	return it
}

// compare: bigint keys (classid, objid as pg_locks has them, objsubid 1)
// before pairs (objsubid 2), each by its lock tag.
func (pgAdvisory) compare(a, b lockItem) int {
	ac, ao, as := PGLockTag(a.pg)
	bc, bo, bs := PGLockTag(b.pg)
	return cmp.Or(cmp.Compare(as, bs), cmp.Compare(ac, bc), cmp.Compare(ao, bo))
}

func (pgAdvisory) serverName(it lockItem) string {
	c, o, s := PGLockTag(it.pg)
	return fmt.Sprintf("classid=%d objid=%d objsubid=%d", c, o, s)
}

func (pgAdvisory) local(it lockItem) localLock { return localLock{key: it.pg, shared: it.shared} }

func (pgAdvisory) tryItem(ctx context.Context, q Querier, it lockItem, probe *slotProbe) (bool, error) {
	return pgTryItem(ctx, q, it, false, probe, "")
}

func (pgAdvisory) unlockItem(ctx context.Context, q Querier, it lockItem) error {
	return pgUnlockItem(ctx, q, it)
}

// mysqlNamed is MySQL's and MariaDB's named locks (GET_LOCK), held by a
// pinned connection: a Transaction's transaction runs on that connection.
type mysqlNamed struct{}

func (mysqlNamed) Name() string       { return "MySQL/MariaDB named lock" }
func (mysqlNamed) SharedMode() bool   { return false }
func (mysqlNamed) ServerWait() bool   { return true }
func (mysqlNamed) SessionLevel() bool { return true }
func (mysqlNamed) XactLevel() bool    { return false }
func (mysqlNamed) OneMessage() bool   { return false }

func (mysqlNamed) resolve(k keys.Key, ns string) lockItem {
	it := plainItem(k)
	it.mysql = keys.MySQL(it.key, ns)
	return it
}

// compare: by name, case-folded (mysqlFold), so that names a
// case-insensitive server (MySQL) takes for one lock are refused as one.
func (mysqlNamed) compare(a, b lockItem) int {
	return strings.Compare(mysqlFold(a.mysql), mysqlFold(b.mysql))
}

func (mysqlNamed) serverName(it lockItem) string { return "GET_LOCK name " + it.mysql }

func (mysqlNamed) local(it lockItem) localLock { return localLock{key: MySQLLockIdentity(it.mysql)} }

func (mysqlNamed) tryItem(ctx context.Context, q Querier, it lockItem, probe *slotProbe) (bool, error) {
	return mysqlGetLockProbe(ctx, q, it.mysql, 0, nil, probe)
}

func (mysqlNamed) unlockItem(ctx context.Context, q Querier, it lockItem) error {
	return MySQLReleaseLock(ctx, q, it.mysql)
}
