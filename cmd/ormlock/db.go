package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
)

// defaultConnectTimeout bounds the first contact with the server (dial,
// login, ping) unless --connect-timeout says otherwise. A DSN's own
// connect_timeout (PostgreSQL) or timeout (MySQL) applies to each dial as
// well.
const defaultConnectTimeout = 10 * time.Second

// common holds the flags every database command takes.
type common struct {
	dsn            string
	namespace      string
	ledger         string
	leases         string // --lease-table
	connectTimeout time.Duration
}

func (c *common) register(fs *flagSet, ledger bool) {
	fs.fl.StringVar(&c.dsn, "dsn", "", "database `DSN`: a PostgreSQL URL or key=value string, a mysql:// URL or a go-sql-driver MySQL DSN")
	fs.env("dsn", "ORMLOCK_DSN")
	fs.fl.StringVar(&c.namespace, "namespace", "", "key namespace (`NS`), as ormlock.WithNamespace")
	fs.env("namespace", "ORMLOCK_NAMESPACE")
	fs.fl.DurationVar(&c.connectTimeout, "connect-timeout", defaultConnectTimeout, "give up reaching the server (connect, log in, first query) after `DURATION`")
	fs.env("connect-timeout", "ORMLOCK_CONNECT_TIMEOUT")
	if ledger {
		fs.fl.StringVar(&c.ledger, "ledger-table", config.DefaultLedgerTable, "ledger `table` of --once-per runs")
		fs.env("ledger-table", "ORMLOCK_LEDGER_TABLE")
		fs.fl.StringVar(&c.leases, "lease-table", config.DefaultLeaseTable, "lease `table` of --lease (ormlock.WithLeaseTable)")
		fs.env("lease-table", "ORMLOCK_LEASE_TABLE")
	}
}

// options returns the library options the flags stand for, or a usage error.
func (c *common) options() ([]ormlock.Option, error) {
	if c.connectTimeout <= 0 {
		return nil, usagef("--connect-timeout must be positive, got %v", c.connectTimeout)
	}
	var opts []ormlock.Option
	if c.namespace != "" {
		opts = append(opts, ormlock.WithNamespace(c.namespace))
	}
	if c.ledger != "" {
		opts = append(opts, ormlock.WithLedgerTable(c.ledger))
	}
	if c.leases != "" {
		opts = append(opts, ormlock.WithLeaseTable(c.leases))
	}
	if err := config.New(opts...).Err(); err != nil {
		return nil, usagef("--namespace/--ledger-table/--lease-table: %s", bare(err))
	}
	return opts, nil
}

// bare is err's text without the library's "ormlock: ", for a message
// that has its own.
func bare(err error) string { return errs.Trim(err.Error()) }

// where says, for a message, which namespace a command looked in: a lock
// or run taken under another namespace is another one.
func (c *common) where() string {
	if c.namespace == "" {
		return "without a namespace (one taken with --namespace or $ORMLOCK_NAMESPACE is another lock)"
	}
	return fmt.Sprintf("in namespace %q (--namespace, $ORMLOCK_NAMESPACE)", c.namespace)
}

// open connects to the database named by --dsn (or $ORMLOCK_DSN) and checks
// that it answers within --connect-timeout. The returned close function
// closes the pool.
func (c *common) open(ctx context.Context) (*gorm.DB, func(), error) {
	if c.dsn == "" {
		return nil, nil, usagef("no database: set --dsn or ORMLOCK_DSN (a postgres:// URL or a MySQL DSN such as user:pass@tcp(host:3306)/db)")
	}
	sqlDB, srv, err := openSQL(c.dsn)
	if err != nil {
		return nil, nil, err
	}
	// A run holds one connection for the lock and uses one for the ledger.
	sqlDB.SetMaxIdleConns(2)
	pctx, cancel := context.WithTimeout(ctx, c.connectTimeout)
	defer cancel()
	if err := sqlDB.PingContext(pctx); err != nil {
		sqlDB.Close()
		return nil, nil, srv.connectError(ctx, pctx, c.connectTimeout, err)
	}
	var d gorm.Dialector
	if srv.dialect == "postgres" {
		d = postgres.New(postgres.Config{Conn: sqlDB})
	} else {
		// The version query GORM would send has no deadline; the locks
		// do not need it.
		d = mysql.New(mysql.Config{Conn: sqlDB, SkipInitializeWithVersion: true})
	}
	db, err := gorm.Open(d, &gorm.Config{Logger: logger.Discard, DisableAutomaticPing: true})
	if err != nil {
		sqlDB.Close()
		return nil, nil, fmt.Errorf("open GORM on the %s: %w", srv, err)
	}
	return db.WithContext(ctx), func() { sqlDB.Close() }, nil
}

// server names the server a DSN points to, for messages.
type server struct {
	dialect string // "postgres" or "MySQL"
	addr    string // host:port, or a socket
}

func (s server) String() string { return fmt.Sprintf("%s server at %s", s.dialect, s.addr) }

// connectError says why the first contact failed: the server refused the
// login (no such database or role, a wrong password), or did not answer.
func (s server) connectError(ctx, pctx context.Context, timeout time.Duration, err error) error {
	var pe *pgconn.PgError
	var me *gomysql.MySQLError
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.As(err, &pe):
		return fmt.Errorf("the %s refused the connection: %s (SQLSTATE %s)", s, pe.Message, pe.Code)
	case errors.As(err, &me):
		return fmt.Errorf("the %s refused the connection: %s (error %d)", s, me.Message, me.Number)
	case pctx.Err() != nil:
		return fmt.Errorf("cannot reach the %s: timed out after %v (--connect-timeout)", s, timeout)
	}
	return fmt.Errorf("cannot reach the %s: %w", s, err)
}

// pgKeyValue matches the start of a PostgreSQL key=value connection string.
var pgKeyValue = regexp.MustCompile(`^\s*[A-Za-z_]+\s*=`)

// openSQL opens a pool for dsn: pgx for a postgres:// or postgresql:// URL
// or a key=value string, go-sql-driver/mysql for a mysql:// URL or a
// go-sql-driver DSN. Unparsable DSNs are usage errors that never echo a
// password. A PostgreSQL DSN without default_query_exec_mode gets pgx's
// simple protocol, which works behind any pooler (PgBouncer before 1.21 in
// transaction mode cannot keep pgx's default prepared statements); a DSN
// that names a mode keeps it.
func openSQL(dsn string) (*sql.DB, server, error) {
	lower := strings.ToLower(dsn)
	if strings.HasPrefix(lower, "postgres://") || strings.HasPrefix(lower, "postgresql://") || pgKeyValue.MatchString(dsn) {
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			// pgconn's message already hides the password.
			return nil, server{}, usagef("bad PostgreSQL DSN: %v", err)
		}
		if !strings.Contains(lower, "default_query_exec_mode") {
			// pgx's default, cache_statement, fails behind a
			// transaction-mode PgBouncer before 1.21; the command's few
			// statements gain nothing from a cache.
			cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		}
		addr := cfg.Host
		if !strings.HasPrefix(addr, "/") {
			addr = net.JoinHostPort(addr, strconv.Itoa(int(cfg.Port)))
		}
		return stdlib.OpenDB(*cfg), server{"postgres", addr}, nil
	}
	var cfg *gomysql.Config
	var err error
	if strings.HasPrefix(lower, "mysql://") {
		cfg, err = parseMySQLURL(dsn)
	} else if m := urlScheme.FindStringSubmatch(dsn); m != nil {
		err = usagef("bad DSN: unknown scheme %q; %s", m[1]+"://", dsnForms)
	} else if cfg, err = gomysql.ParseDSN(dsn); err != nil {
		err = badDSN(dsn, err)
	}
	if err != nil {
		return nil, server{}, err
	}
	// The driver would log dropped connections on stderr too; ormlock
	// reports them once, as errors.
	cfg.Logger = log.New(io.Discard, "", 0)
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, server{}, usagef("bad MySQL DSN: %v", err)
	}
	return sql.OpenDB(conn), server{"MySQL", cfg.Addr}, nil
}

// dsnForms is what --dsn accepts, for messages.
const dsnForms = "--dsn takes a postgres:// or postgresql:// URL (postgres://user:pass@host:5432/db), " +
	"a PostgreSQL key=value string (host=h port=5432 user=u dbname=db), " +
	"a mysql:// URL (mysql://user:pass@host:3306/db) " +
	"or a go-sql-driver MySQL DSN (user:pass@tcp(host:3306)/db)"

// urlScheme matches a URL's scheme: what a MySQL DSN never starts with, as
// its user name is followed by ':' or '@', not "://".
var urlScheme = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*)://`)

// schemeTypo matches a PostgreSQL or MySQL URL whose "://" is mistyped
// (postgresql//host, postgres:/host, mysql:host), and captures it.
var schemeTypo = regexp.MustCompile(`(?i)^((postgres(ql)?|pg|mysql|mariadb)(:/?|//?))[^/]`)

// badDSN says why dsn, which is not a URL nor a key=value string, is no
// MySQL DSN either: what the DSN seems to be meant as, and what --dsn
// accepts. It quotes no more of dsn than a mistyped scheme, never the
// password.
func badDSN(dsn string, err error) error {
	if m := schemeTypo.FindStringSubmatch(dsn); m != nil {
		scheme := strings.ToLower(m[2])
		if scheme == "pg" || scheme == "postgresql" {
			scheme = "postgres"
		} else if scheme == "mariadb" {
			scheme = "mysql"
		}
		return usagef("bad DSN: it starts %q, which looks like a mistyped %s:// URL (the scheme must be followed by \"://\"); %s", m[1], scheme, dsnForms)
	}
	why := err.Error()
	switch {
	case strings.Contains(why, "default addr for network"):
		why = "its address must be tcp(host:port) or unix(/path/to/socket), between '@' and '/'"
	case strings.Contains(why, "missing the slash"):
		why = "no '/' before the database name (user:pass@tcp(host:3306)/db, or .../ for none)"
	}
	return usagef("bad DSN: not a URL nor a key=value string, and as a MySQL DSN %s; %s", why, dsnForms)
}

// parseMySQLURL reads mysql://user:pass@host:port/db?params (port 3306 by
// default), the password URL-decoded, into go-sql-driver's configuration.
func parseMySQLURL(dsn string) (*gomysql.Config, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error quotes the URL, password and all
		}
		return nil, usagef("bad mysql:// URL: %v", err)
	}
	if u.Host == "" {
		return nil, usagef("bad mysql:// URL: no host (mysql://user:pass@host:3306/db)")
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "3306")
	}
	// The query's parameters are go-sql-driver's, as after its DSN's "?".
	cfg, err := gomysql.ParseDSN("tcp(" + addr + ")/?" + u.RawQuery)
	if err != nil {
		return nil, usagef("bad mysql:// URL parameters: %v", err)
	}
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	return cfg, nil
}

// isMissingTable reports whether err is the server's "no such table".
func isMissingTable(err error) bool {
	var pe *pgconn.PgError
	var me *gomysql.MySQLError
	return errors.As(err, &pe) && pe.Code == "42P01" || errors.As(err, &me) && me.Number == 1146
}

// dbError adds what an operator can do to errors from the database.
func dbError(err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errs.PreparedClash(err) && !strings.Contains(err.Error(), errs.PoolerHint):
		return fmt.Errorf("%w (%s)", err, errs.PoolerHint)
	case isMissingTable(err):
		// The library's hint names its Go function; this is the command.
		msg := err.Error()
		if hinted := strings.Replace(msg, "(create it with Migrate)", "(create it with: ormlock migrate)", 1); hinted != msg {
			return &rephrased{msg: hinted, err: err}
		}
		return fmt.Errorf("%w; create it with: ormlock migrate", err)
	}
	return err
}

// rephrased is err with another text.
type rephrased struct {
	msg string
	err error
}

func (e *rephrased) Error() string { return e.msg }
func (e *rephrased) Unwrap() error { return e.err }

// parseInterspersed parses args with fs, allowing flags after positional
// arguments (ormlock holder KEY --dsn ...), and returns the positionals.
// A "--" ends the flags (and is dropped), as in package flag.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// flagSet is a flag set with its usage text and the environment variables
// its flags default to.
type flagSet struct {
	// fl is the standard flag set (a named field: flagSet's own methods
	// are few, and flag.FlagSet's are reached through it)
	fl   *flag.FlagSet
	help func()
	envs [][2]string // flag name, variable
}

// env makes the flag name default to the environment variable v when it
// is not given; --help says so.
func (fs *flagSet) env(name, v string) {
	f := fs.fl.Lookup(name)
	f.Usage += "; or $" + v
	fs.envs = append(fs.envs, [2]string{name, v})
}

// newFlagSet returns a flag set whose --help prints usage and the flags to
// stdout, and which prints nothing itself on a parse error.
func newFlagSet(name, usage string, stdout io.Writer) *flagSet {
	fs := flag.NewFlagSet("ormlock "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {} // parse errors are reported once, by status
	help := func() {
		fmt.Fprint(stdout, usage)
		fmt.Fprintln(stdout, "\nFlags:")
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return &flagSet{fl: fs, help: help}
}

// parseFlags wraps fs.Parse errors as usage errors; --help prints the usage
// to stdout and returns flag.ErrHelp.
func parseFlags(fs *flagSet, args []string) ([]string, error) {
	pos, err := parseInterspersed(fs.fl, args)
	if errors.Is(err, flag.ErrHelp) {
		fs.help()
		return nil, err
	}
	if err != nil {
		return nil, &usageError{msg: err.Error()}
	}
	given := map[string]bool{}
	fs.fl.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, e := range fs.envs {
		if v := os.Getenv(e[1]); v != "" && !given[e[0]] {
			if err := fs.fl.Set(e[0], v); err != nil {
				return nil, usagef("$%s: invalid value %q for --%s: %v", e[1], v, e[0], err)
			}
		}
	}
	return pos, nil
}

// parseOneArg is parseFlags for a command that takes one argument, what
// (KEY, JOB, NAME).
func parseOneArg(fs *flagSet, args []string, what string) (string, error) {
	pos, err := parseFlags(fs, args)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 {
		return "", usagef("expected one %s, got %d arguments", what, len(pos))
	}
	return pos[0], nil
}

// parseKeyArg is parseOneArg for a lock key (KEY, NAME), which it also
// returns read by parseKey.
func parseKeyArg(fs *flagSet, args []string, what string) (string, ormlock.Key, error) {
	arg, err := parseOneArg(fs, args, what)
	if err != nil {
		return "", ormlock.Key{}, err
	}
	key, err := parseKey(arg)
	return arg, key, err
}
