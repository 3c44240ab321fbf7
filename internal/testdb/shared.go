package testdb

import (
	"database/sql"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
)

// sharedServer is the lazily started server of one kind for the whole test
// binary; its error is remembered so that later callers fail the same way.
type sharedServer struct {
	once sync.Once
	srv  *Server
	err  error
}

var (
	mainCalled atomic.Bool
	shared     = map[Kind]*sharedServer{Postgres: {}, PgBouncer: {}, MariaDB: {}}

	adminMu sync.Mutex
	admins  = map[string]*sql.DB{} // by driver and DSN
)

// Main runs the tests and then stops every server the test binary started and
// removes their temp dirs. Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }
func Main(m *testing.M) int {
	mainCalled.Store(true)
	code := m.Run()
	shutdown()
	return code
}

func shutdown() {
	adminMu.Lock()
	for key, db := range admins {
		db.Close()
		delete(admins, key)
	}
	adminMu.Unlock()
	// PgBouncers first, so that PostgreSQL's fast shutdown has no pooler
	// reconnecting to it; then everything else in parallel.
	liveMu.Lock()
	var bouncers, others []*Server
	for s := range live {
		if s.kind == PgBouncer {
			bouncers = append(bouncers, s)
		} else {
			others = append(others, s)
		}
	}
	liveMu.Unlock()
	closeAll(bouncers)
	closeAll(others)
}

func closeAll(ss []*Server) {
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Close()
		}()
	}
	wg.Wait()
}

// startShared returns the shared server of kind k, starting it on first use.
// Not used when the kind's DSN env var is set.
func startShared(k Kind) (*Server, error) {
	if !mainCalled.Load() {
		return nil, fmt.Errorf("testdb: the package's TestMain must call testdb.Main (func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }) so that the shared %s server is stopped", k)
	}
	sh := shared[k]
	sh.once.Do(func() { sh.srv, sh.err = doStartShared(k) })
	return sh.srv, sh.err
}

func doStartShared(k Kind) (*Server, error) {
	if k != PgBouncer {
		b := findBinaries(k, false)
		if err := b.err(k); err != nil {
			return nil, err
		}
		return startServer(k, b, pgTarget{})
	}
	// The shared PgBouncer fronts the shared PostgreSQL, or the one named by
	// ORMLOCK_TEST_POSTGRES_DSN.
	var t pgTarget
	if dsn := envDSN(Postgres); dsn != "" {
		b := findBinaries(PgBouncer, false)
		if err := b.err(PgBouncer); err != nil {
			return nil, err
		}
		var err error
		if t, err = targetFromDSN(dsn); err != nil {
			return nil, err
		}
		return startServer(PgBouncer, b, t)
	}
	b := findBinaries(PgBouncer, true)
	if err := b.err(PgBouncer); err != nil {
		return nil, err
	}
	pg, err := startShared(Postgres)
	if err != nil {
		return nil, err
	}
	// Its own database on that server: advisory locks carry their
	// database, so the leak checks of the two kinds, which run in parallel
	// (the scheduler module's forEachKind), never see each other's locks.
	if err := pg.createDB(bouncerDBName); err != nil {
		return nil, err
	}
	t = pg.asTarget()
	t.database, t.adminDSN = bouncerDBName, pgURL(pg.port, bouncerDBName, "")
	return startServer(PgBouncer, b, t)
}

// dsn returns the DSN of kind k's server: the kind's ORMLOCK_TEST_*_DSN
// when set, else the shared server's, started on first use. admin asks for
// its admin DSN (for PgBouncer, PostgreSQL's own behind it: its
// ORMLOCK_TEST_POSTGRES_DSN when set).
func dsn(k Kind, admin bool) (string, error) {
	if !k.valid() {
		return "", fmt.Errorf("testdb: unknown kind %q", k)
	}
	if admin && k == PgBouncer {
		if d := envDSN(Postgres); d != "" {
			return d, nil
		}
	}
	if d := envDSN(k); d != "" {
		return d, nil
	}
	s, err := startShared(k)
	switch {
	case err != nil:
		return "", err
	case admin:
		return s.AdminDSN(), nil
	}
	return s.DSN(), nil
}

// adminDB returns the shared admin pool for kind k.
func adminDB(k Kind) (*sql.DB, error) {
	d, err := dsn(k, true)
	if err != nil {
		return nil, err
	}
	key := k.Driver() + " " + d
	adminMu.Lock()
	defer adminMu.Unlock()
	if db := admins[key]; db != nil {
		return db, nil
	}
	db, err := openAdmin(k, d)
	if err != nil {
		return nil, err
	}
	admins[key] = db
	return db, nil
}

// DSN returns the DSN of the test binary's shared server of kind k, starting
// it on first use (or the kind's ORMLOCK_TEST_*_DSN when set). It skips the
// test when the binaries are missing (fails it when CI is set).
func DSN(tb testing.TB, k Kind) string {
	tb.Helper()
	d, err := dsn(k, false)
	if err != nil {
		skipOrFail(tb, err)
	}
	return d
}

// Open returns a new pool on the shared server of kind k (driver "pgx" or
// "mysql"), closed in tb.Cleanup.
func Open(tb testing.TB, k Kind) *sql.DB {
	tb.Helper()
	db, err := sql.Open(k.Driver(), DSN(tb, k))
	if err != nil {
		tb.Fatalf("testdb: open %s: %v", k, err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// AdminDB returns a superuser pool straight to the shared server of kind k
// (for PgBouncer: to the PostgreSQL behind it). The pool is shared by the
// test binary and closed by Main; tests must not close it.
func AdminDB(tb testing.TB, k Kind) *sql.DB {
	tb.Helper()
	db, err := adminDB(k)
	if err != nil {
		skipOrFail(tb, err)
	}
	return db
}

// LogPath returns the log file of the shared server that executes the SQL of
// kind k: PostgreSQL's for Postgres and PgBouncer, MariaDB's for MariaDB. It
// is "" when a DSN env var points the kind at an external server.
func LogPath(tb testing.TB, k Kind) string {
	tb.Helper()
	if envDSN(k) != "" || (k == PgBouncer && envDSN(Postgres) != "") {
		return ""
	}
	s, err := startShared(k)
	if err != nil {
		skipOrFail(tb, err)
	}
	if k == PgBouncer {
		return s.target.logPath
	}
	return s.logPath
}

// Start starts a private server of kind k (its own temp dir and port) for
// tests that restart or stop it; it is stopped and removed in tb.Cleanup.
// For PgBouncer it is a private PgBouncer in front of a private PostgreSQL
// (see Backend).
func Start(tb testing.TB, k Kind) *Server {
	tb.Helper()
	s, err := StartServer(k)
	return stopAtCleanup(tb, s, err)
}

// stopAtCleanup returns s, the server a Start function started, and stops
// it in tb.Cleanup; when starting failed with err it skips or fails tb
// (skipOrFail).
func stopAtCleanup(tb testing.TB, s *Server, err error) *Server {
	tb.Helper()
	if err != nil {
		skipOrFail(tb, err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Logf("%v", err)
		}
	})
	return s
}

// Environment variables that override the shared servers.
const (
	envPostgresDSN  = "ORMLOCK_TEST_POSTGRES_DSN"
	envPgBouncerDSN = "ORMLOCK_TEST_PGBOUNCER_DSN"
	envMySQLDSN     = "ORMLOCK_TEST_MYSQL_DSN"
)

func envDSN(k Kind) string {
	switch k {
	case Postgres:
		return os.Getenv(envPostgresDSN)
	case PgBouncer:
		return os.Getenv(envPgBouncerDSN)
	case MariaDB:
		return os.Getenv(envMySQLDSN)
	}
	return ""
}
