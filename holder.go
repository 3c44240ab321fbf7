package ormlock

import (
	"strconv"
	"strings"
	"time"
)

// HolderInfo says who holds a lock, as the database server sees it at the
// moment of the lookup: the answer to "who holds this lock?" (see
// gormlock.Holder). When nobody holds the lock, Held is false and the
// lookup's error is nil; the fields describing the holder are then zero.
//
// What the servers expose differs; each field says where it comes from.
// PostgreSQL: pg_locks (locktype 'advisory') joined with pg_stat_activity.
// MySQL/MariaDB: IS_USED_LOCK(name) joined with
// information_schema.PROCESSLIST. A caller without the privilege to see
// other sessions (PostgreSQL: pg_read_all_stats or the holder's role;
// MySQL: PROCESS) still gets Held and PID, with the other fields empty or
// PostgreSQL's "<insufficient privilege>".
type HolderInfo struct {
	// Held reports whether some session holds the lock.
	Held bool
	// Dialect is "postgres" or "mysql".
	Dialect string
	// Lock is the lock as the server names it: on PostgreSQL the pg_locks
	// coordinates, "classid=C objid=O objsubid=S" (objsubid 1 for a bigint
	// key, 2 for a pair), on MySQL/MariaDB the GET_LOCK name.
	Lock string

	// PID is the holder's PostgreSQL backend pid (pg_backend_pid(); 0 for
	// a prepared transaction) or its MySQL/MariaDB connection id
	// (CONNECTION_ID()): what pg_terminate_backend and KILL take.
	PID int64
	// User is the holder's database user.
	User string
	// Application is PostgreSQL's application_name; always "" on
	// MySQL/MariaDB.
	Application string
	// ClientAddr is the holder's client address: PostgreSQL's
	// client_addr:client_port ("" for a Unix socket), MySQL's HOST
	// ("host:port"). Behind PgBouncer it is PgBouncer's address.
	ClientAddr string
	// Database is the holder's current database (PostgreSQL datname,
	// MySQL DB; "" when none).
	Database string
	// State is what the holder's connection is doing: PostgreSQL's state
	// ("active", "idle in transaction", "idle"...), MySQL's COMMAND
	// ("Sleep", "Query"...) followed by its STATE in parentheses when set.
	State string
	// StateFor is how long the connection has been in State (PostgreSQL:
	// since state_change; MySQL: PROCESSLIST.TIME, in whole seconds).
	StateFor time.Duration
	// Query is the holder's current statement, or on PostgreSQL its last
	// one when idle (pg_stat_activity.query); MySQL's INFO is empty while
	// the connection sleeps.
	Query string
	// Mode is the lock mode on PostgreSQL ("ExclusiveLock", or "ShareLock"
	// for pg_advisory_lock_shared, which ormlock never takes); "" on MySQL.
	Mode string

	// TxStart is when the holder's current transaction began (PostgreSQL
	// xact_start; zero when it is not in one, and always zero on MySQL).
	TxStart time.Time
	// ConnStart is when the holder's connection began (PostgreSQL
	// backend_start; zero on MySQL).
	ConnStart time.Time
	// HeldFor is an upper bound on how long the lock has been held; no
	// server records when an advisory or named lock was taken.
	// PostgreSQL: since TxStart when the holder is in a transaction, which
	// is exact to within the few milliseconds before the lock call for
	// ormlock's own locks (transaction-level locks, taken first thing in
	// their transaction); else since ConnStart (a session-level lock taken
	// by other code). A session-level lock whose holder has since begun a
	// transaction is underestimated. MySQL/MariaDB: 0, unknown.
	HeldFor time.Duration

	// Waiters is how many sessions are queued for the lock (PostgreSQL:
	// ungranted pg_locks rows, e.g. ormlock calls with WithWait). Always 0
	// on MySQL/MariaDB, which does not say who waits for a named lock.
	Waiters int
}

// String returns a one-line, key=value description, e.g.
//
//	held pid=4242 user=app application=billing client=10.0.0.7:51234 database=app state="idle in transaction" state_for=1.2s held_for=1.3s waiters=0 query="SELECT 1"
//
// or "free" (followed by waiters=N when some are queued).
func (h HolderInfo) String() string {
	var b strings.Builder
	if !h.Held {
		b.WriteString("free")
		if h.Waiters > 0 {
			b.WriteString(" waiters=")
			b.WriteString(strconv.Itoa(h.Waiters))
		}
		return b.String()
	}
	b.WriteString("held pid=")
	b.WriteString(strconv.FormatInt(h.PID, 10))
	field := func(name, v string) {
		if v == "" {
			return
		}
		b.WriteByte(' ')
		b.WriteString(name)
		b.WriteByte('=')
		if strings.ContainsAny(v, " \"=\t\n") {
			v = strconv.Quote(v)
		}
		b.WriteString(v)
	}
	dur := func(name string, d time.Duration) {
		if d > 0 {
			field(name, d.Round(time.Millisecond).String())
		}
	}
	field("user", h.User)
	field("application", h.Application)
	field("client", h.ClientAddr)
	field("database", h.Database)
	field("mode", h.Mode)
	field("state", h.State)
	dur("state_for", h.StateFor)
	dur("held_for", h.HeldFor)
	b.WriteString(" waiters=")
	b.WriteString(strconv.Itoa(h.Waiters))
	field("query", h.Query)
	return b.String()
}
