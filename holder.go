package ormlock

import "github.com/ormlock/ormlock/internal/status"

// HolderInfo says who holds a lock, as the database server sees it at the
// moment of the lookup: the answer to "who holds this lock?" (see
// gormlock.Holder). When nobody holds the lock, Held is false and the
// lookup's error is nil; the fields describing the holder are then zero.
//
// What the servers expose differs; each field says where it comes from.
// PostgreSQL: pg_locks (locktype 'advisory') joined with pg_stat_activity.
// MySQL/MariaDB: IS_USED_LOCK(name) joined with
// information_schema.PROCESSLIST.
//
// What it reveals, and to whom. Any database user can look up any lock
// (advisory and named locks need no grant, and namespaces are no boundary:
// see [WithNamespace]), and then sees:
//
//   - PostgreSQL, without pg_read_all_stats and not a member of the holder's
//     role: Held, Lock, PID, Mode, Waiters, User and Database (pg_locks and
//     these pg_stat_activity columns are public); Application, ClientAddr,
//     State and the times are empty or zero, Query is
//     "<insufficient privilege>".
//   - MySQL/MariaDB, without the PROCESS privilege and not the holder's
//     user: Held, Lock and PID (IS_USED_LOCK is public); the PROCESSLIST
//     fields are empty.
//   - With those privileges (or as the holder's own role/user): everything,
//     including Query, the holder's SQL text. It can carry secrets: values
//     interpolated into the text appear in clear (go-sql-driver/mysql with
//     interpolateParams=true, pgx's simple protocol, which the PgBouncer
//     setups use, or any hand-built SQL), up to 64 KiB on MySQL/MariaDB and
//     track_activity_query_size (1 KiB by default) on PostgreSQL.
//
// So its String method, meant for logs, leaves the query out; use
// StringWithQuery where the reader may see the holder's SQL.
// Every value is printed quoted and escaped (strconv.Quote) when it holds
// anything but printable characters without spaces, so a holder's
// application_name or query cannot forge or rewrite a log or terminal line.
//
// It is defined once, in internal/status, and named here. Its fields:
//
//	type HolderInfo struct {
//		// Held reports whether some session holds the lock.
//		Held bool
//		// Dialect is "postgres" or "mysql".
//		Dialect string
//		// Lock is the lock as the server names it: on PostgreSQL the pg_locks
//		// coordinates, "classid=C objid=O objsubid=S" (objsubid 1 for a bigint
//		// key, 2 for a pair), on MySQL/MariaDB the GET_LOCK name.
//		Lock string
//
//		// PID is the holder's PostgreSQL backend pid (pg_backend_pid(); 0 for
//		// a prepared transaction) or its MySQL/MariaDB connection id
//		// (CONNECTION_ID()): what pg_terminate_backend and KILL take.
//		PID int64
//		// User is the holder's database user.
//		User string
//		// Application is PostgreSQL's application_name; always "" on
//		// MySQL/MariaDB.
//		Application string
//		// Owner names the holder as it named itself with WithOwner, where the
//		// server can record it without a round trip on the lock's path:
//		//
//		//   - PostgreSQL (direct or behind PgBouncer): the holder's
//		//     application_name. A Session (any shape, on shared lock
//		//     connections too), a RunOnce in claim mode and a Lead set it to
//		//     their owner (at most 63 bytes of it) for as long as they hold the
//		//     lock. A Transaction (and RunOnce in transaction mode) does not, so
//		//     its Owner is its connection's own application_name (the DSN's,
//		//     "" by default), as is any other holder's: name a process by its
//		//     DSN's application_name to see it here whatever the verb.
//		//   - MySQL/MariaDB, whose PROCESSLIST has no column a client can set:
//		//     the row that a Lead (and ormlock run --owner, ormlock lead)
//		//     writes in the owners table for its connection and lock (see
//		//     docs/PROTOCOL.md, Lead). "" for a Session, a Transaction, RunOnce
//		//     and any other holder: recording it would cost three round trips
//		//     and a write per lock (a claimed run's owner is in the ledger:
//		//     Runs).
//		Owner string
//		// ClientAddr is the holder's client address: PostgreSQL's
//		// client_addr:client_port ("" for a Unix socket), MySQL's HOST
//		// ("host:port"). Behind PgBouncer it is PgBouncer's address.
//		ClientAddr string
//		// Database is the holder's current database (PostgreSQL datname,
//		// MySQL DB; "" when none).
//		Database string
//		// State is what the holder's connection is doing: PostgreSQL's state
//		// ("active", "idle in transaction", "idle"...), MySQL's COMMAND
//		// ("Sleep", "Query"...) followed by its STATE in parentheses when set.
//		State string
//		// StateFor is how long the connection has been in State (PostgreSQL:
//		// since state_change; MySQL: PROCESSLIST.TIME, in whole seconds).
//		StateFor time.Duration
//		// Query is the holder's current statement, or on PostgreSQL its last
//		// one when idle (pg_stat_activity.query); MySQL's INFO is empty while
//		// the connection sleeps. It may contain secrets (see above) and
//		// arbitrary bytes: escape it before printing it.
//		Query string
//		// Mode is the lock mode on PostgreSQL: "ExclusiveLock", or
//		// "ShareLock" for a holder in share mode (Shared, or raw
//		// pg_advisory_lock_shared); "" on MySQL/MariaDB, whose named locks are
//		// exclusive. HolderInfo.Shared says the same on every server.
//		Mode string
//
//		// TxStart is when the holder's current transaction began (PostgreSQL
//		// xact_start; zero when it is not in one, and always zero on MySQL).
//		TxStart time.Time
//		// ConnStart is when the holder's connection began (PostgreSQL
//		// backend_start; zero on MySQL).
//		ConnStart time.Time
//		// HeldFor is how long the lock has been held, as far as the server
//		// shows it; no server records when an advisory or named lock was
//		// taken. PostgreSQL: for a Session or a Lead (and ormlock run and
//		// lead), since the lock was granted, a wait before it (WithWait, a
//		// campaign) left out: the holder's keepalive says how far into its
//		// transaction the lock came, to within a round trip, and until its
//		// first keepalive it has been idle since the lock (state_change). For
//		// any other holder in a transaction, since TxStart: exact for an
//		// ormlock Transaction that took its lock at once, an upper bound when
//		// it waited; outside a transaction, since ConnStart (a session-level
//		// lock taken by other code). A session-level lock whose holder has
//		// since begun a transaction is underestimated. MySQL/MariaDB: 0,
//		// unknown.
//		HeldFor time.Duration
//
//		// Waiters is how many sessions are queued for the lock (PostgreSQL:
//		// ungranted pg_locks rows, e.g. ormlock calls with WithWait). Always 0
//		// on MySQL/MariaDB, which does not say who waits for a named lock.
//		Waiters int
//
//		// Key names the key this holder holds, as Key.String prints it: set
//		// by Holders (one row per holder of each key of a set, of each slot of
//		// a semaphore, the semaphore's key here); "" from Holder.
//		Key string
//		// Shared reports a holder in share mode (Shared; PostgreSQL only).
//		Shared bool
//		// Slot is the semaphore slot held (1 to n) in a row of Holders of a
//		// Semaphore; 0 otherwise.
//		Slot int
//
//		// Mechanism is the kind of lock this row describes: "advisory" (a
//		// PostgreSQL advisory lock), "named" (a MySQL/MariaDB named lock,
//		// GET_LOCK) or "lease" (a row of the lease table, WithLease). A
//		// lease and an advisory or named lock of the same key are different
//		// locks that exclude nobody of the other kind, so Holders lists both
//		// (see Leases below). Set on every answer, free ones included.
//		Mechanism string
//		// Epoch is a lease's epoch: the fencing token its holder's
//		// FencingToken returns and CheckFenced compares, greater than every
//		// earlier holder's of the key. 0 for an advisory or named lock
//		// (their tokens live in the fence table: `ormlock fence`).
//		Epoch int64
//		// ExpiresIn is how long a lease has left before it expires unless its
//		// holder renews it, by the server's clock at the lookup (the lease's
//		// expiry minus clock_timestamp() / NOW(6)): a live holder renews every
//		// third of its TTL, so it stays between about two thirds of the TTL
//		// and the TTL. 0 for an advisory or named lock, and for a free lease
//		// (an expired lease is free: Held false).
//		ExpiresIn time.Duration
//	}
//
// Leases. For a lease (Mechanism "lease") the row of the lease table is
// the whole truth, as no connection holds it: Held, Lock (the table and
// the row's key, "ormlock_leases lock_key=name:daily-settlement", with
// " reader=ID" for one reader of a shared key; the namespace is the row's
// other key column),
// Owner (the holder's WithOwner, or the host and process it defaulted
// to), Epoch, ExpiresIn, Mode ("exclusive" or "shared"; Shared too) and
// HeldFor (since the epoch was granted, by the server's clock) are set;
// PID, User, Application, ClientAddr, Database, State, StateFor, Query,
// TxStart and ConnStart are empty, and Waiters is 0 (a lease's waiters
// retry; none queue on the server). Holder and Holders with WithLease read
// the lease table only; without it they read the advisory or named lock and
// then the key's live lease, if any, as a row of its own (Holders), or
// (Holder) when the advisory or named lock is free and a lease is held.
// The lease table is read only where Migrate created it: on a server
// without it the advisory or named answer stands alone.
//
// Its methods:
//
//	// String returns a one-line, key=value description without the query, e.g.
//	//
//	//	held pid=4242 user=app owner=billing client=10.0.0.7:51234 database=app state="idle in transaction" state_for=1.2s held_for=1.3s waiters=0
//	//
//	// or "free" (followed by waiters=N when some are queued). A lease has
//	// no pid and no waiters: it prints
//	//
//	//	held lease epoch=42 key=billing:nightly owner=replica-a mode=exclusive held_for=1m2.5s expires_in=21.3s
//	// The owner is
//	// owner=, and application= follows only when it says something else (on
//	// PostgreSQL Owner is the application_name). A value is quoted
//	// with strconv.Quote when it contains a space, '"', '=', a backslash or any
//	// character strconv.Quote would escape (control characters, U+2028...), so
//	// the line is always one line of printable text.
//	func (h HolderInfo) String() string
//
//	// StringWithQuery is String followed by query="..." with at most
//	// limit bytes of the holder's query (cut at a character boundary and
//	// marked "…" when longer; all of it when limit <= 0), quoted. The query
//	// may carry secrets (see above).
//	func (h HolderInfo) StringWithQuery(limit int) string
type HolderInfo = status.HolderInfo
