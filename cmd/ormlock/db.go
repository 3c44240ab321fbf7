package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"regexp"
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
)

// connectTimeout bounds the first contact with the server (dial, login,
// ping). A DSN's own connect_timeout (PostgreSQL) or timeout (MySQL) applies
// to each dial as well.
const connectTimeout = 15 * time.Second

// common holds the flags every database command takes.
type common struct {
	dsn       string
	namespace string
	ledger    string
}

func (c *common) register(fs *flag.FlagSet, ledger bool) {
	fs.StringVar(&c.dsn, "dsn", "", "database `DSN`: a PostgreSQL URL or key=value string, or a go-sql-driver MySQL DSN (default $ORMLOCK_DSN)")
	fs.StringVar(&c.namespace, "namespace", "", "key namespace (`NS`), as ormlock.WithNamespace")
	if ledger {
		fs.StringVar(&c.ledger, "ledger-table", config.DefaultLedgerTable, "ledger `table` of --once-per runs")
	}
}

// options returns the library options the flags stand for, or a usage error.
func (c *common) options() ([]ormlock.Option, error) {
	var opts []ormlock.Option
	if c.namespace != "" {
		opts = append(opts, ormlock.WithNamespace(c.namespace))
	}
	if c.ledger != "" {
		opts = append(opts, ormlock.WithLedgerTable(c.ledger))
	}
	if err := config.New(opts...).Err(); err != nil {
		return nil, &usageError{msg: "--namespace/--ledger-table: " + err.Error()}
	}
	return opts, nil
}

// open connects to the database named by --dsn or $ORMLOCK_DSN and checks
// that it answers. The returned close function closes the pool.
func (c *common) open(ctx context.Context) (*gorm.DB, func(), error) {
	dsn := c.dsn
	if dsn == "" {
		dsn = os.Getenv("ORMLOCK_DSN")
	}
	if dsn == "" {
		return nil, nil, usagef("no database: set --dsn or ORMLOCK_DSN (a postgres:// URL or a MySQL DSN such as user:pass@tcp(host:3306)/db)")
	}
	sqlDB, dialect, err := openSQL(dsn)
	if err != nil {
		return nil, nil, err
	}
	// A run holds one connection for the lock and uses one for the ledger.
	sqlDB.SetMaxIdleConns(2)
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := sqlDB.PingContext(pctx); err != nil {
		sqlDB.Close()
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, nil, fmt.Errorf("cannot reach the %s server: %w", dialect, err)
	}
	var d gorm.Dialector
	if dialect == "postgres" {
		d = postgres.New(postgres.Config{Conn: sqlDB})
	} else {
		// The version query GORM would send has no deadline; the locks
		// do not need it.
		d = mysql.New(mysql.Config{Conn: sqlDB, SkipInitializeWithVersion: true})
	}
	db, err := gorm.Open(d, &gorm.Config{Logger: logger.Discard, DisableAutomaticPing: true})
	if err != nil {
		sqlDB.Close()
		return nil, nil, fmt.Errorf("open GORM on the %s server: %w", dialect, err)
	}
	return db.WithContext(ctx), func() { sqlDB.Close() }, nil
}

// pgKeyValue matches the start of a PostgreSQL key=value connection string.
var pgKeyValue = regexp.MustCompile(`^\s*[A-Za-z_]+\s*=`)

// openSQL opens a pool for dsn: pgx for a postgres:// or postgresql:// URL
// or a key=value string, go-sql-driver/mysql otherwise. Unparsable DSNs are
// usage errors that never echo a password.
func openSQL(dsn string) (*sql.DB, string, error) {
	lower := strings.ToLower(dsn)
	if strings.HasPrefix(lower, "postgres://") || strings.HasPrefix(lower, "postgresql://") || pgKeyValue.MatchString(dsn) {
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			// pgconn's message already hides the password.
			return nil, "", usagef("bad PostgreSQL DSN: %v", err)
		}
		return stdlib.OpenDB(*cfg), "postgres", nil
	}
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return nil, "", usagef("bad DSN: not a postgres:// URL, a PostgreSQL key=value string or a MySQL DSN (user:pass@tcp(host:3306)/db): %v", err)
	}
	// The driver would log dropped connections on stderr too; ormlock
	// reports them once, as errors.
	cfg.Logger = log.New(io.Discard, "", 0)
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, "", usagef("bad MySQL DSN: %v", err)
	}
	return sql.OpenDB(conn), "MySQL", nil
}

// dbError adds what an operator can do to errors from the database.
func dbError(err error) error {
	if err == nil {
		return nil
	}
	var pe *pgconn.PgError
	var me *gomysql.MySQLError
	switch {
	case errors.As(err, &pe) && pe.Code == "42P01", errors.As(err, &me) && me.Number == 1146:
		return fmt.Errorf("%w; create it with: ormlock migrate", err)
	}
	return err
}

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

// flagSet is a flag set with its usage text.
type flagSet struct {
	*flag.FlagSet
	help func()
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
	return &flagSet{FlagSet: fs, help: help}
}

// parseFlags wraps fs.Parse errors as usage errors; --help prints the usage
// to stdout and returns flag.ErrHelp.
func parseFlags(fs *flagSet, args []string) ([]string, error) {
	pos, err := parseInterspersed(fs.FlagSet, args)
	if errors.Is(err, flag.ErrHelp) {
		fs.help()
		return nil, err
	}
	if err != nil {
		return nil, &usageError{msg: err.Error()}
	}
	return pos, nil
}
