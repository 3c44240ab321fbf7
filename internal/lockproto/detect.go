package lockproto

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"weak"

	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
)

// Fake locks. Some servers accept the lock functions and exclude nobody:
//
//   - a PostgreSQL hot standby (pg_is_in_recovery()): its advisory locks are
//     local to the standby, so a replica pool (a dbresolver replica, a
//     misrouted DSN) excludes no client of the primary;
//   - CockroachDB before v26.3, whose pg_advisory_* builtins are no-op stubs
//     that return true (from v26.3 the transaction-level ones are real,
//     replicated locks);
//   - MySQL/MariaDB servers with read_only=ON or innodb_read_only=ON (a
//     replica, an Aurora MySQL reader), MariaDB Galera
//     nodes (wsrep_on=ON with a provider: GET_LOCK is local to the node and
//     every Galera node accepts writes, so any node can be the one a client
//     reaches), and MySQL Group Replication in multi-primary mode
//     (group_replication_single_primary_mode=OFF with more than one ONLINE
//     member).
//
// CheckServer asks once per pool and refuses these with an error wrapping
// errs.ErrUnsupportedDialect that names the reason, before any lock is
// taken. A genuine answer is cached for the pool (weakly: a pool that is
// garbage collected leaves the cache), so the cost is one query on the
// first call per pool (PostgreSQL: one round trip; MySQL: one, two for a
// Group Replication member) and a map look-up afterwards. A refusal or an
// error is not cached: the next call asks again. Nor does a genuine answer
// outlive a sign that the server behind the pool may have changed: a verb
// of the pool that loses its lock or fails to release it (a connection
// broken under it: a restart, a failover, an address moved to another
// server) forgets it, so that the next call asks again and a demoted
// primary, now a standby or a replica, is refused rather than trusted from
// the cache (failover.TestServerCheckAskedAgainAfterLoss). A pool that
// reconnects while no lock is held is not seen: database/sql replaces a
// broken idle connection without telling.
//
// The cache is per pool, not per connection: a pool is assumed to reach one
// server. A DSN that spreads connections over several hosts (libpq
// multi-host lists, a load balancer in front of primary and replicas) is
// checked on whichever connection answered first.

// genuine holds the pools found to hand out real locks.
var genuine sync.Map // weak.Pointer[sql.DB] -> *serverFacts (engines.go)

// EndedLock is the check a verb that takes a lock for its caller makes
// after its arguments' and before the server check (CheckServer): nil while
// ctx is live; once ctx has ended (a deadline that has passed counts before
// its timer fires), an error wrapping errs.ErrNotAcquired and ctx's
// error, so that the call sends nothing: no connection is taken from the
// pool and the server is not asked.
func EndedLock(ctx context.Context, o *Op) error {
	if err := Ended(ctx); err != nil {
		return notAcquired(ctx, o, err)
	}
	return nil
}

// Ended is EndedLock for the verbs that take no lock for their caller
// (Holder, Migrate, Runs, Prune): once ctx has ended, ctx's error itself
// (joined with its cause, when that is another error).
func Ended(ctx context.Context) error {
	err := ctxErr(ctx)
	if err == nil {
		return nil
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, err) {
		return errs.Join(err, cause)
	}
	return err
}

// CheckPool is the server check of a verb without an Op (Runs, Prune): nil
// when the server of db, of dialect d, hands out real locks, an error
// wrapping errs.ErrUnsupportedDialect when it does not, or the error of
// the detection query; q is db, or the caller's transaction on it (see
// CheckServerOn). The answer is cached as CheckServer's is.
func CheckPool(ctx context.Context, d Dialect, db *sql.DB, q CheckQuerier) error {
	return checkPool(ctx, &Op{Dialect: d}, db, q)
}

// CheckServer returns nil when db's server hands out locks that exclude
// every client of that server, and an error wrapping
// errs.ErrUnsupportedDialect naming the reason when it does not (see the
// comment above). An error of the detection query itself is returned as it
// is, through Abandon, so that a context that ended matches
// errs.ErrNotAcquired too. Nothing is checked for a nil db.
func CheckServer(ctx context.Context, o *Op, db *sql.DB) error {
	return CheckServerOn(ctx, o, db, db)
}

// CheckQuerier runs the detection queries: a *sql.DB, *sql.Conn or *sql.Tx.
type CheckQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// CheckServerOn is CheckServer with the detection queries sent through q
// (an open transaction or a pinned connection of db) instead of a new
// connection of db, for a call nested in a transaction: with every
// connection of db in use (MaxOpenConns 1) a query on db would wait for the
// caller's own transaction to end. The answer is still cached for db.
func CheckServerOn(ctx context.Context, o *Op, db *sql.DB, q CheckQuerier) error {
	err := checkPool(ctx, o, db, q)
	if err != nil && !errors.Is(err, errs.ErrUnsupportedDialect) {
		// the detection query failed: when ctx ended, it is not acquired
		return o.Abandon(ctx, err)
	}
	return err
}

// checkPool is CheckServerOn without the classification of a failed query.
func checkPool(ctx context.Context, o *Op, db *sql.DB, q CheckQuerier) error {
	if db == nil || q == nil {
		return nil
	}
	wp := WeakOf(db)
	o.checkedMu.Lock()
	o.checkedPool = wp
	o.checkedMu.Unlock()
	if f, ok := genuine.Load(wp); ok {
		return f.(*serverFacts).refuse(o)
	}
	if !poolQuerier(q) {
		// q is the caller's own transaction or connection: waiting for a
		// check on another connection of db could wait for q itself.
		return checkServer(ctx, o, db, wp, q)
	}
	// One check at a time per pool: the first calls on a cold pool (a
	// service that starts 1,000 Sessions at once) would otherwise each take
	// a connection to ask the same question. The others wait for its answer;
	// a refusal or an error is not shared, so each of them then asks itself.
	c := &inflightCheck{done: make(chan struct{})}
	if v, loaded := checking.LoadOrStore(wp, c); loaded {
		other := v.(*inflightCheck)
		select {
		case <-other.done:
			if f, ok := genuine.Load(wp); ok && other.err == nil {
				return f.(*serverFacts).refuse(o)
			}
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		return checkServer(ctx, o, db, wp, q)
	}
	defer func() {
		checking.Delete(wp)
		close(c.done)
	}()
	c.err = checkServer(ctx, o, db, wp, q)
	return c.err
}

// poolQuerier reports whether q, the check's querier, is a pool rather
// than the caller's own transaction or connection: the pool the check is
// cached under, or pgxlock's *sql.DB of one call (opened lazily or not)
// over the pgx pool that the cache key stands for.
func poolQuerier(q CheckQuerier) bool {
	switch q.(type) {
	case *sql.DB, LazyDB:
		return true
	}
	return false
}

// serverMayHaveChanged forgets the genuine verdict of the pool o checked:
// o lost its lock or could not release it, so the connection broke under
// it and the pool's next connection may reach another server.
func serverMayHaveChanged(o *Op) {
	o.checkedMu.Lock()
	wp := o.checkedPool
	o.checkedMu.Unlock()
	if wp != (weak.Pointer[sql.DB]{}) {
		genuine.Delete(wp)
	}
}

// inflightCheck is the check of one pool that is running: done is closed
// when err holds its outcome.
type inflightCheck struct {
	done chan struct{}
	err  error
}

// checking holds the checks that are running.
var checking sync.Map // weak.Pointer[sql.DB] -> *inflightCheck

// checkServer asks db's server through q and caches a genuine answer.
func checkServer(ctx context.Context, o *Op, db *sql.DB, wp weak.Pointer[sql.DB], q CheckQuerier) error {
	s, err := ServerOf(o.Dialect)
	if err != nil {
		return nil // nothing to check
	}
	verdict, err := s.check(ctx, q)
	if err != nil {
		return err
	}
	facts, err := verdict()
	if err != nil {
		return err
	}
	if _, loaded := genuine.LoadOrStore(wp, facts); !loaded {
		runtime.AddCleanup(db, func(wp weak.Pointer[sql.DB]) { genuine.Delete(wp) }, wp)
	}
	return facts.refuse(o)
}

// checkPostgres asks db's server; verdict judges the answers. The query
// also reads the columns cols (", ..." or "") into dest (CheckNested reads
// the transaction's isolation so).
func checkPostgres(ctx context.Context, db rowQuerier, cols string, dest ...any) (verdict func() (*serverFacts, error), err error) {
	var (
		version    string
		inRecovery bool
		ybSilence  sql.NullString
		conn       *sql.Conn
	)
	if lazy, ok := db.(LazyDB); ok {
		db = lazy.DB() // pgxlock's call: the *sql.DB over its pool
	}
	if pool, ok := db.(*sql.DB); ok {
		// on a connection of its own, whose start-up the multiplexer
		// probe compares with a second one
		if conn, err = pool.Conn(ctx); err != nil {
			return nil, errs.Wrap(err, "check the server's locks")
		}
		defer conn.Close()
		db = conn
	}
	if err := db.QueryRowContext(ctx, "SELECT version(), pg_is_in_recovery()"+cols).Scan(append([]any{&version, &inRecovery}, dest...)...); err != nil {
		return nil, errs.Wrap(err, "check the server's locks (SELECT version(), pg_is_in_recovery())")
	}
	if IsYugabyte(version) { // a second round trip on YugabyteDB only
		q := "SELECT current_setting('" + YBSilenceSetting + "', true)"
		if err := db.QueryRowContext(ctx, q).Scan(&ybSilence); err != nil {
			return nil, errs.Wrap(err, "check the server's locks (%s)", q)
		}
	}
	var multiplexed error
	if conn != nil {
		multiplexed = multiplexerVerdict(ctx, conn)
	}
	return func() (*serverFacts, error) {
		if multiplexed != nil {
			return nil, multiplexed
		}
		if err := PostgresVerdict("", inRecovery); err != nil {
			return nil, err // a hot standby takes no write either
		}
		// CockroachDB's stub builtins: only a lease works
		fake := PostgresVerdict(version, false)
		session, err := PostgresEngineVerdict(version, ybSilence.String)
		if err != nil && fake == nil {
			return nil, err
		}
		return &serverFacts{sessionLocks: session, fakeLocks: fake, product: ServerProduct(Postgres, version)}, nil
	}, nil
}

// crdbVersion finds CockroachDB's version in version()'s answer, such as
// "CockroachDB CCL v24.1.2 (x86_64-pc-linux-gnu, ...)".
var crdbVersion = regexp.MustCompile(`CockroachDB\b.*?\bv(\d+)\.(\d+)`)

// crdbAdvisory is the first CockroachDB release whose transaction-level
// advisory lock builtins take real, replicated locks (system.advisory_locks).
var crdbAdvisory = [2]int{26, 3}

// PostgresVerdict judges a PostgreSQL-protocol server by the answers to
// "SELECT version(), pg_is_in_recovery()": nil when its advisory locks are
// real, else an error wrapping errs.ErrUnsupportedDialect.
func PostgresVerdict(version string, inRecovery bool) error {
	if strings.Contains(version, "CockroachDB") {
		m := crdbVersion.FindStringSubmatch(version)
		if m == nil {
			return fmt.Errorf("%w: CockroachDB of unknown version (%q): its advisory lock builtins are no-op stubs before v%d.%d; %s", errs.ErrUnsupportedDialect, version, crdbAdvisory[0], crdbAdvisory[1], LeaseAdvice)
		}
		major, _ := strconv.Atoi(m[1])
		minor, _ := strconv.Atoi(m[2])
		if major < crdbAdvisory[0] || (major == crdbAdvisory[0] && minor < crdbAdvisory[1]) {
			return fmt.Errorf("%w: CockroachDB v%d.%d: its advisory lock builtins are no-op stubs that exclude nobody (real transaction-level advisory locks from v%d.%d); %s", errs.ErrUnsupportedDialect, major, minor, crdbAdvisory[0], crdbAdvisory[1], LeaseAdvice)
		}
	}
	if inRecovery {
		return fmt.Errorf("%w: the server is a PostgreSQL hot standby (pg_is_in_recovery() is true): its advisory locks are local to the standby and exclude no client of the primary; point the pool at the primary", errs.ErrUnsupportedDialect)
	}
	return nil
}

// mysqlVars is the variables query: SHOW works on MySQL and MariaDB alike,
// and a variable the server does not have is simply absent.
const mysqlVars = `SHOW GLOBAL VARIABLES WHERE Variable_name IN ('read_only', 'innodb_read_only', 'wsrep_on', 'wsrep_provider', 'group_replication_single_primary_mode', 'version')`

// checkMySQL asks db's server; verdict judges the answers.
func checkMySQL(ctx context.Context, db CheckQuerier) (verdict func() (*serverFacts, error), err error) {
	rows, err := db.QueryContext(ctx, mysqlVars)
	if err != nil {
		return nil, errs.Wrap(err, "check the server's locks (%s)", mysqlVars)
	}
	vars := map[string]string{}
	for rows.Next() {
		var name, value sql.NullString
		if err := rows.Scan(&name, &value); err != nil {
			rows.Close()
			return nil, errs.Wrap(err, "check the server's locks")
		}
		vars[strings.ToLower(name.String)] = value.String
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, errs.Wrap(err, "check the server's locks")
	}
	members := 0
	if isOff(vars["group_replication_single_primary_mode"]) {
		const q = `SELECT COUNT(*) FROM performance_schema.replication_group_members WHERE MEMBER_STATE = 'ONLINE'`
		if err := db.QueryRowContext(ctx, q).Scan(&members); err != nil {
			return nil, errs.Wrap(err, "check the server's locks (%s)", q)
		}
	}
	return func() (*serverFacts, error) {
		f := &serverFacts{keepalive: MySQLKeepaliveVerdict(vars["version"]), product: ServerProduct(MySQL, vars["version"])}
		if err := MySQLVerdict(vars, members); err != nil {
			// a cluster's node whose tables take writes: a lease works
			if MySQLVerdict(withoutCluster(vars), 0) != nil {
				return nil, err
			}
			f.fakeLocks = err
		}
		f.rate = rateVersionVerdict(vars["version"], isOn(vars["wsrep_on"]) && !isNone(vars["wsrep_provider"]))
		return f, nil
	}, nil
}

// MySQLVerdict judges a MySQL-protocol server by its variables (names in
// lower case: read_only, innodb_read_only, wsrep_on, wsrep_provider,
// group_replication_single_primary_mode; absent when the server lacks them)
// and, for Group Replication in multi-primary mode, its number of ONLINE
// members: nil when GET_LOCK excludes every client that can write, else an
// error wrapping errs.ErrUnsupportedDialect.
func MySQLVerdict(vars map[string]string, onlineMembers int) error {
	if isOn(vars["wsrep_on"]) && !isNone(vars["wsrep_provider"]) {
		return fmt.Errorf("%w: the server is a Galera cluster node (wsrep_on=ON): GET_LOCK is local to one node while every node accepts writes; %s", errs.ErrUnsupportedDialect, LeaseAdvice)
	}
	if isOff(vars["group_replication_single_primary_mode"]) && onlineMembers > 1 {
		return fmt.Errorf("%w: the server is a member of a multi-primary Group Replication group (%d members ONLINE): GET_LOCK is local to one member; %s", errs.ErrUnsupportedDialect, onlineMembers, LeaseAdvice)
	}
	for _, v := range []string{"read_only", "innodb_read_only"} {
		if isOn(vars[v]) {
			return fmt.Errorf("%w: the server is read-only (%s=ON: a replica, an Aurora reader?): GET_LOCK there is local to it and excludes no client of the primary; point the pool at the primary", errs.ErrUnsupportedDialect, v)
		}
	}
	return nil
}

func isOn(v string) bool {
	return strings.EqualFold(v, "ON") || v == "1" || strings.EqualFold(v, "TRUE")
}

func isOff(v string) bool {
	return strings.EqualFold(v, "OFF") || v == "0" || strings.EqualFold(v, "FALSE")
}

func isNone(v string) bool {
	return v == "" || strings.EqualFold(v, "none")
}

// refuse returns the refusal, if any, of o's path on a server with facts f.
func (f *serverFacts) refuse(o *Op) error {
	if f == nil {
		return nil
	}
	if err := f.fake(o); err != nil {
		return err
	}
	// each is set by its own server's check only (f is the facts of o's
	// pool, whose server is of o's dialect)
	if f.sessionLocks != nil && o.Cfg.SharedConns > 0 {
		return fmt.Errorf("%w: %s with WithSharedLockConns: %w", errs.ErrUnsupportedDialect, o.Verb, f.sessionLocks)
	}
	if f.keepalive != nil && keepsAlive(o) {
		return fmt.Errorf("%w: %s: %w", errs.ErrUnsupportedDialect, o.Verb, f.keepalive)
	}
	if f.rate != nil && keys.IsRate(o.Key) {
		return fmt.Errorf("%w: %s of %s: %w", errs.ErrUnsupportedDialect, o.Verb, o.Key.String(), f.rate)
	}
	return nil
}
