package testdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"
)

const (
	readyTimeout = 60 * time.Second
	toolTimeout  = 120 * time.Second
	portAttempts = 5
	dbName       = "ormlock"
	// bouncerDBName is the database behind the shared PgBouncer, on the
	// shared PostgreSQL (see doStartShared).
	bouncerDBName = "ormlock_pgbouncer"
	pgSuperuser   = "postgres"
)

// Server is a database server process started by this package.
type Server struct {
	kind    Kind
	bins    binaries
	dir     string // private temp dir, removed by Close
	logPath string
	cred    *syscall.Credential
	port    int
	target  pgTarget // PgBouncer: the PostgreSQL it fronts
	backend *Server  // PgBouncer started by StartServer: its private PostgreSQL
	// extra: settings after the defaults (PostgreSQL: -c name=value
	// each; MariaDB: options), for the replication topologies.
	extra []string
	// env: variables added to the server process's environment (the
	// libfaketime preload of a server with a Clock).
	env   []string
	clock *Clock // nil unless started under libfaketime (faketime.go)

	mu        sync.Mutex
	p         *proc
	dataMade  bool // initdb / mariadb-install-db done
	dbCreated bool // database "ormlock" created
	closed    bool
	admin     *sql.DB
}

// PID returns the server process's pid (0 when it is not running), for
// tests that freeze it.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil || s.p.cmd.Process == nil {
		return 0
	}
	return s.p.cmd.Process.Pid
}

// pgTarget is the PostgreSQL server behind a PgBouncer.
type pgTarget struct {
	host     string
	port     int
	user     string
	password string
	database string
	adminDSN string
	logPath  string // "" for an external server
}

// Registry of live servers, so that Main can stop what tests left behind.
var (
	liveMu sync.Mutex
	live   = map[*Server]struct{}{}
)

// StartServer starts a private server of kind k and waits until it accepts
// queries. For PgBouncer it starts a private PostgreSQL behind a private
// PgBouncer (see Backend). The caller must Close the server.
func StartServer(k Kind) (*Server, error) {
	if !k.valid() {
		return nil, fmt.Errorf("testdb: unknown kind %q", k)
	}
	return startServerWith(k, findBinaries(k, true))
}

// startServerWith is StartServer with the binaries b.
func startServerWith(k Kind, b binaries) (*Server, error) {
	if err := b.err(k); err != nil {
		return nil, err
	}
	if k != PgBouncer {
		return startServer(k, b, pgTarget{})
	}
	pg, err := startServer(Postgres, b, pgTarget{})
	if err != nil {
		return nil, err
	}
	s, err := startServer(PgBouncer, b, pg.asTarget())
	if err != nil {
		pg.Close()
		return nil, err
	}
	s.backend = pg
	return s, nil
}

func startServer(k Kind, b binaries, t pgTarget) (*Server, error) {
	s, err := newServer(k, b, t)
	if err != nil {
		return nil, err
	}
	if err := s.start(false); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// newServer makes a server's temp dir and registers it, not started.
func newServer(k Kind, b binaries, t pgTarget) (*Server, error) {
	cred, err := credential(k)
	if err != nil {
		return nil, err
	}
	dir, err := tempDir(k, cred)
	if err != nil {
		return nil, fmt.Errorf("testdb: %s: %w", k, err)
	}
	s := &Server{kind: k, bins: b, dir: dir, cred: cred, target: t,
		logPath: filepath.Join(dir, string(k)+".log")}
	liveMu.Lock()
	live[s] = struct{}{}
	liveMu.Unlock()
	return s, nil
}

func (s *Server) asTarget() pgTarget {
	return pgTarget{host: "127.0.0.1", port: s.port, user: pgSuperuser, database: dbName,
		adminDSN: s.AdminDSN(), logPath: s.logPath}
}

// Kind is the server's kind.
func (s *Server) Kind() Kind { return s.kind }

// Port is the TCP port the server listens on (on 127.0.0.1).
func (s *Server) Port() int { return s.port }

// LogPath is the file that the server process logs to. For a PgBouncer
// server it is PgBouncer's log; Backend().LogPath() is PostgreSQL's.
func (s *Server) LogPath() string { return s.logPath }

// Backend is the private PostgreSQL behind a PgBouncer server made by
// Start or StartServer, nil for other servers.
func (s *Server) Backend() *Server { return s.backend }

// DSN is the connection string for clients: a pgx URL for Postgres and
// PgBouncer (with default_query_exec_mode=simple_protocol for PgBouncer), a
// go-sql-driver/mysql DSN for MariaDB.
func (s *Server) DSN() string {
	switch s.kind {
	case Postgres:
		return pgURL(s.port, dbName, "")
	case PgBouncer:
		return pgURL(s.port, dbName, "default_query_exec_mode=simple_protocol")
	default:
		return mysqlDSN(s.port)
	}
}

// AdminDSN is a superuser DSN straight to the server; for PgBouncer, to the
// PostgreSQL behind it.
func (s *Server) AdminDSN() string {
	if s.kind == PgBouncer {
		return s.target.adminDSN
	}
	return s.DSN()
}

func pgURL(port int, db, extra string) string {
	u := fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", pgSuperuser, port, db)
	if extra != "" {
		u += "&" + extra
	}
	return u
}

// Restart stops the server and starts it again on the same port and data
// dir, waiting until it accepts queries. For PostgreSQL the stop is a fast
// shutdown (SIGINT), for MariaDB SIGTERM; connections made before are broken.
// For a PgBouncer server only PgBouncer restarts (see Backend).
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	if err := s.restart(); err != nil {
		tb.Fatalf("%v", err)
	}
}

func (s *Server) restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("testdb: %s: restart of a closed server", s.kind)
	}
	s.stopLocked()
	return s.startLocked(true)
}

// Stop stops the server process; the data dir is kept, so Restart can start
// it again. For a PgBouncer server only PgBouncer stops.
func (s *Server) Stop(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stopLocked(); err != nil {
		tb.Logf("testdb: %s: %v", s.kind, err)
	}
}

// Close stops the server (and a PgBouncer server's backend) and removes its
// temp dir. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	var errs []error
	if s.admin != nil {
		s.admin.Close()
		s.admin = nil
	}
	if err := s.stopLocked(); err != nil {
		errs = append(errs, fmt.Errorf("testdb: %s: %w", s.kind, err))
	}
	s.mu.Unlock()
	if s.backend != nil {
		errs = append(errs, s.backend.Close())
	}
	if s.dir != "" {
		if err := os.RemoveAll(s.dir); err != nil {
			errs = append(errs, err)
		}
	}
	liveMu.Lock()
	delete(live, s)
	liveMu.Unlock()
	return errors.Join(errs...)
}

func (s *Server) stopLocked() error {
	if s.p == nil {
		return nil
	}
	p := s.p
	s.p = nil
	switch s.kind {
	case Postgres:
		// SIGINT: fast shutdown; SIGQUIT: immediate shutdown.
		return p.stop(stopStep{syscall.SIGINT, 10 * time.Second}, stopStep{syscall.SIGQUIT, 3 * time.Second})
	case PgBouncer:
		// SIGTERM is an immediate shutdown up to 1.22; from 1.23 on it waits
		// for clients and SIGQUIT is the immediate one.
		return p.stop(stopStep{syscall.SIGTERM, time.Second}, stopStep{syscall.SIGQUIT, 3 * time.Second})
	default:
		return p.stop(stopStep{syscall.SIGTERM, 20 * time.Second})
	}
}

func (s *Server) start(fixedPort bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.startLocked(fixedPort)
}

// startLocked initializes the data dir on first use, starts the process and
// waits until it is ready, retrying on another port when the port was taken
// (unless fixedPort).
func (s *Server) startLocked(fixedPort bool) error {
	if s.p != nil {
		return nil
	}
	if !s.dataMade {
		if err := s.initData(); err != nil {
			return err
		}
		s.dataMade = true
	}
	for attempt := 1; ; attempt++ {
		if !fixedPort {
			port, err := FreePort()
			if err != nil {
				return fmt.Errorf("testdb: %s: free port: %w", s.kind, err)
			}
			s.port = port
		}
		off := fileSize(s.logPath)
		err := s.launch(off)
		if err == nil {
			break
		}
		if fixedPort || attempt >= portAttempts || !portInUse(s.logPath, off) {
			return err
		}
	}
	if !s.dbCreated {
		if err := s.createDatabase(); err != nil {
			s.stopLocked()
			return err
		}
		s.dbCreated = true
	}
	return nil
}

// initData makes the data dir: initdb, mariadb-install-db.
func (s *Server) initData() error {
	data := filepath.Join(s.dir, "data")
	var err error
	switch s.kind {
	case Postgres:
		err = runTool(toolTimeout, s.bins.initdb, []string{
			"-D", data, "-U", pgSuperuser, "-A", "trust", "-E", "UTF8", "--locale=C",
			"--no-sync", "--no-instructions",
		}, s.dir, filepath.Join(s.dir, "initdb.log"), s.cred)
	case MariaDB:
		// --tmpdir: concurrent bootstraps sharing /tmp collide on their
		// temporary tables ("Unknown table 'mysql.tmp_user_sys'").
		args := []string{
			"--no-defaults", "--datadir=" + data, "--tmpdir=" + s.dir,
			"--auth-root-authentication-method=normal",
			"--skip-test-db", "--skip-name-resolve", "--innodb-log-file-size=16M",
		}
		for attempt := 1; ; attempt++ {
			err = runTool(toolTimeout, s.bins.install, args, s.dir, filepath.Join(s.dir, "install-db.log"), s.cred)
			if err == nil || attempt == 2 {
				break
			}
			// The bootstrap server has been seen to crash under load: once
			// more from scratch.
			if rerr := os.RemoveAll(data); rerr != nil {
				break
			}
		}
	}
	if err != nil {
		return fmt.Errorf("testdb: %s: %w", s.kind, err)
	}
	return nil
}

func (s *Server) args() ([]string, string, error) {
	data := filepath.Join(s.dir, "data")
	switch s.kind {
	case Postgres:
		set := []string{
			"listen_addresses=127.0.0.1",
			"unix_socket_directories=" + s.dir,
			"fsync=off",
			"synchronous_commit=off",
			"full_page_writes=off",
			"shared_buffers=32MB",
			"max_connections=200",
			"max_wal_size=256MB",
			"jit=off",
			"huge_pages=off",
			"logging_collector=off",
			"log_destination=stderr",
			"log_min_messages=warning",
			"log_min_error_statement=error",
			"log_line_prefix=%m [%p] %q%u@%d %a: ",
		}
		set = append(set, s.extra...)
		args := []string{"-D", data, "-p", strconv.Itoa(s.port)}
		for _, kv := range set {
			args = append(args, "-c", kv)
		}
		return args, s.bins.postgres, nil
	case PgBouncer:
		ini := filepath.Join(s.dir, "pgbouncer.ini")
		if err := os.WriteFile(ini, []byte(s.pgbouncerIni()), 0o644); err != nil {
			return nil, "", err
		}
		return []string{ini}, s.bins.pgbouncer, nil
	default:
		return append([]string{
			"--no-defaults",
			"--datadir=" + data,
			"--port=" + strconv.Itoa(s.port),
			"--bind-address=127.0.0.1",
			"--socket=" + filepath.Join(s.dir, "mysql.sock"),
			"--pid-file=" + filepath.Join(s.dir, "mariadbd.pid"),
			"--tmpdir=" + s.dir,
			"--skip-networking=0",
			"--skip-log-bin",
			"--skip-name-resolve",
			"--character-set-server=utf8mb4",
			"--collation-server=utf8mb4_general_ci",
			"--max-connections=300",
			"--innodb-buffer-pool-size=64M",
			"--innodb-log-file-size=16M",
			"--innodb-flush-log-at-trx-commit=0",
			"--innodb-doublewrite=0",
			"--innodb-use-native-aio=0",
			"--performance-schema=0",
			"--plugin-load-add=metadata_lock_info",
		}, s.extra...), s.bins.mariadbd, nil
	}
}

func (s *Server) pgbouncerIni() string {
	t := s.target
	conn := fmt.Sprintf("host=%s port=%d user=%s", iniQuote(t.host), t.port, iniQuote(t.user))
	if t.password != "" {
		conn += " password=" + iniQuote(t.password)
	}
	return fmt.Sprintf(`[databases]
%s = %s dbname=%s
* = %s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
pidfile =
logfile =
syslog = 0
auth_type = any
admin_users = %s
stats_users = %s
pool_mode = transaction
max_client_conn = 500
default_pool_size = 20
min_pool_size = 0
reserve_pool_size = 0
server_login_retry = 1
server_connect_timeout = 5
ignore_startup_parameters = extra_float_digits,options
log_connections = 0
log_disconnections = 0
log_pooler_errors = 1
`, dbName, conn, iniQuote(t.database), conn, s.port, pgSuperuser, pgSuperuser)
}

// iniQuote quotes a libpq-style connection string value for pgbouncer.ini.
func iniQuote(v string) string {
	if v != "" && !strings.ContainsAny(v, " '\\\t") {
		return v
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// launch starts the process and waits for it to answer queries.
func (s *Server) launch(logOff int64) error {
	args, bin, err := s.args()
	if err != nil {
		return fmt.Errorf("testdb: %s: %w", s.kind, err)
	}
	p, err := startProc(bin, args, s.dir, s.logPath, s.cred, s.env...)
	if err != nil {
		return fmt.Errorf("testdb: %s: %w", s.kind, err)
	}
	s.p = p
	deadline := time.Now().Add(readyTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err = s.ping(ctx)
		cancel()
		if err == nil {
			if s.kind == PgBouncer {
				go s.revive(p, logOff)
			}
			return nil
		}
		if p.exited() {
			s.p = nil
			return fmt.Errorf("testdb: %s exited during start-up (%v); last lines of %s:\n%s",
				s.kind, p.err, s.logPath, logTail(s.logPath, logOff))
		}
		if time.Now().After(deadline) {
			s.stopLocked()
			return fmt.Errorf("testdb: %s not ready after %v (last error: %v); last lines of %s:\n%s",
				s.kind, readyTimeout, err, s.logPath, logTail(s.logPath, logOff))
		}
		select {
		case <-p.done:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// revive starts PgBouncer again on its port when p, its process, exits
// while it is meant to run (not stopped by Stop, Restart or Close).
// PgBouncer 1.18 can exit on a FATAL of its own when clients cancel
// queries and servers drop connections under load ("server in bad
// state"); the tests that provoke that on purpose (a lock connection
// killed) would otherwise leave every later PgBouncer test of the binary
// without its pooler. The exit and the log's last lines are printed.
func (s *Server) revive(p *proc, logOff int64) {
	<-p.done
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.p != p {
		return // stopped on purpose, or already replaced
	}
	s.p = nil
	fmt.Fprintf(os.Stderr, "testdb: %s on port %d exited unexpectedly (%v); starting it again; last lines of %s:\n%s\n",
		s.kind, s.port, p.err, s.logPath, logTail(s.logPath, logOff))
	if err := s.startLocked(true); err != nil {
		fmt.Fprintf(os.Stderr, "testdb: %s: %v\n", s.kind, err)
	}
}

// ping opens a real connection and runs SELECT 1.
func (s *Server) ping(ctx context.Context) error {
	switch s.kind {
	case Postgres:
		// Before the first start's CREATE DATABASE only "postgres" exists.
		return pgPing(ctx, pgURL(s.port, "postgres", "connect_timeout=3"))
	case PgBouncer:
		return pgPing(ctx, s.DSN()+"&connect_timeout=3")
	default:
		cfg := mysql.NewConfig()
		cfg.User = "root"
		cfg.Net = "tcp"
		cfg.Addr = "127.0.0.1:" + strconv.Itoa(s.port)
		cfg.Timeout = 3 * time.Second
		c, err := mysql.NewConnector(cfg)
		if err != nil {
			return err
		}
		db := sql.OpenDB(c)
		defer db.Close()
		var one int
		return db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
	}
}

func pgPing(ctx context.Context, dsn string) error {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	var one int
	return c.QueryRow(ctx, "SELECT 1").Scan(&one)
}

// createDatabase creates the "ormlock" database on the first start.
func (s *Server) createDatabase() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	switch s.kind {
	case Postgres:
		var c *pgx.Conn
		if c, err = pgx.Connect(ctx, pgURL(s.port, "postgres", "")); err == nil {
			_, err = c.Exec(ctx, "CREATE DATABASE "+dbName)
			c.Close(context.Background())
		}
	case MariaDB:
		var db *sql.DB
		if db, err = sql.Open("mysql", fmt.Sprintf("root@tcp(127.0.0.1:%d)/", s.port)); err == nil {
			_, err = db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+dbName+" CHARACTER SET utf8mb4")
			db.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("testdb: %s: create database %s: %w", s.kind, dbName, err)
	}
	return nil
}

// createDB creates another database on a running PostgreSQL server.
func (s *Server) createDB(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, pgURL(s.port, "postgres", ""))
	if err == nil {
		_, err = c.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
		c.Close(context.Background())
	}
	if err != nil {
		return fmt.Errorf("testdb: %s: create database %s: %w", s.kind, name, err)
	}
	return nil
}

// adminDB is the server's own admin pool, closed by Close.
func (s *Server) adminDB() (*sql.DB, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.admin == nil {
		db, err := openAdmin(s.kind, s.AdminDSN())
		if err != nil {
			return nil, err
		}
		s.admin = db
	}
	return s.admin, nil
}

func openAdmin(k Kind, dsn string) (*sql.DB, error) {
	drv := k.Driver()
	db, err := sql.Open(drv, dsn)
	if err != nil {
		return nil, fmt.Errorf("testdb: %s: open admin pool: %w", k, err)
	}
	db.SetMaxOpenConns(4)
	db.SetMaxIdleConns(2)
	db.SetConnMaxIdleTime(30 * time.Second)
	return db, nil
}

// targetFromDSN describes an external PostgreSQL (ORMLOCK_TEST_POSTGRES_DSN)
// for a PgBouncer to front.
func targetFromDSN(dsn string) (pgTarget, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return pgTarget{}, fmt.Errorf("testdb: parse %s: %w", envPostgresDSN, err)
	}
	return pgTarget{host: cfg.Host, port: int(cfg.Port), user: cfg.User, password: cfg.Password,
		database: cfg.Database, adminDSN: dsn}, nil
}
