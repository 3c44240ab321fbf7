// Package testdb starts real, ephemeral database servers for tests:
// PostgreSQL, PgBouncer (pool_mode=transaction) in front of it, and MariaDB.
//
// Every server lives in its own temp dir, listens on 127.0.0.1 on a free port
// and runs as a child process of the test binary (as root, under an
// unprivileged user: "postgres" or "mysql", else "nobody"). Shared servers are
// started lazily, once per test binary, on the first DSN/Open/AdminDB call for
// their Kind, and stopped by Main after the tests; children also get
// SIGKILL if the test binary dies (Pdeathsig), so no server outlives it.
//
// The API, documented on each declaration (go doc ./internal/testdb): the
// shared servers (Main, DSN, Open, AdminDB, ForEachKind), the invariants
// every test asserts (AssertNoLeaks, Leaks), hand-written locks to contend
// with (RawHold, RawFree), the server log (LogPath, LogOffset, LogLines,
// AssertNoDuplicateKeyLogged), an observer that records events (Recorder),
// private servers for restart and kill tests (Start, StartOn, Server), and
// the replication topologies of package failover: a PostgreSQL primary with
// a streaming standby (StartPGReplication, StartPGReplicationWith), a
// MariaDB primary with a replica (StartMariaDBReplication), a Galera
// cluster (StartGalera, StartGaleraWith: its nodes' DSNs, Kill of a node),
// pglite-socket
// (StartPGlite), and the TCP Proxy they put on links a test freezes or
// cuts (StartProtocolProxy and ProxyDSN make one that also holds the
// replies to chosen statements: DelayReplies; FreezeAll stalls new
// connections too), and servers whose clock a test moves while they run
// (StartFaked and the topologies' fake-clock settings, under Debian's
// libfaketime: Clock, Server.Skew).
// The helpers every test package would otherwise copy live here too, once:
// the in-process exclusion counter (Holders), per-test slots and tables
// (Slot, TableName, Table), connection killers (Kill, WaitGone) and the
// hand-written lock protocol (Handwritten); behaviour suites live with the
// tests that run them (internal/conformance). GORM's helpers are in
// internal/gormtest, ent's in internal/enttest, so that this package
// imports neither ORM.
//
// Environment: ORMLOCK_TEST_POSTGRES_DSN, ORMLOCK_TEST_PGBOUNCER_DSN and
// ORMLOCK_TEST_MYSQL_DSN, when set, are used by DSN/Open/AdminDB instead of
// starting a shared server (AdminDB uses the same DSN; for PgBouncer it uses
// ORMLOCK_TEST_POSTGRES_DSN when set). When only ORMLOCK_TEST_POSTGRES_DSN is
// set, the shared PgBouncer fronts that server. Start and StartServer always
// start private servers. ORMLOCK_TEST_PG_BINDIR (a directory with initdb and
// postgres, such as a bin dir printed by scripts/fetch-postgres) and
// ORMLOCK_TEST_PGBOUNCER (the pgbouncer binary) choose the binaries of every
// server the package starts, shared or private (StartOn excepted);
// ORMLOCK_PG_CACHE is where scripts/fetch-postgres keeps PostgreSQL releases
// (default /var/cache/ormlock/pg for root, else ~/.cache/ormlock/pg). make
// compat uses them to run the suite on other versions.
// ORMLOCK_TEST_MYSQL_LOCKS=skip makes the MySQL leak checks look at
// connections only, for engines that cannot list user locks
// (go-mysql-server); without it they fail saying so.
//
// Databases: the shared PostgreSQL serves database "ormlock" to the Postgres
// kind and "ormlock_pgbouncer" to the shared PgBouncer (AdminDB(PgBouncer)
// reaches the latter), so that the leak checks of the two kinds, whose tests
// may run in parallel, never see each other's advisory locks (pg_locks rows
// carry their database). Private PgBouncers front their own PostgreSQL's
// "ormlock".
//
// Missing binaries make the TB functions skip the test with a message naming
// the install command, except when the CI environment variable is non-empty,
// where they fail it.
//
// The PgBouncer DSN carries default_query_exec_mode=simple_protocol so that pgx
// does not use named prepared statements through a transaction-mode pooler.
package testdb

import "testing"

// Kind names a database server flavour.
type Kind string

// The server kinds.
const (
	Postgres  Kind = "postgres"
	PgBouncer Kind = "pgbouncer"
	MariaDB   Kind = "mariadb"
)

// Kinds returns all kinds: Postgres, PgBouncer, MariaDB.
func Kinds() []Kind { return []Kind{Postgres, PgBouncer, MariaDB} }

// ForEachKind runs f in a subtest, named after the kind, for each of Kinds.
func ForEachKind(t *testing.T, f func(t *testing.T, k Kind)) {
	t.Helper()
	for _, k := range Kinds() {
		t.Run(string(k), func(t *testing.T) { f(t, k) })
	}
}

// Dialect is "postgres" for Postgres and PgBouncer and "mysql" for MariaDB.
func (k Kind) Dialect() string {
	if k == MariaDB {
		return "mysql"
	}
	return "postgres"
}

// Driver is the database/sql driver name for the kind: "pgx" for Postgres
// and PgBouncer, "mysql" for MariaDB.
func (k Kind) Driver() string {
	if k == MariaDB {
		return "mysql"
	}
	return "pgx"
}

func (k Kind) valid() bool {
	switch k {
	case Postgres, PgBouncer, MariaDB:
		return true
	}
	return false
}
