// Package demo is what the example programs share and that is not theirs to
// show: the main function around their run, and the GORM pool on -dsn.
package demo

import (
	"context"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// Main calls run with the program's arguments and standard output and
// error, on a context that an interrupt (Ctrl-C) ends, and exits with
// status 1 and "name: error" when run fails.
func Main(name string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		log.SetFlags(0)
		log.Fatalf("%s: %v", name, err)
	}
}

// IsPostgres reports whether dsn is PostgreSQL's (a postgres:// URL or a
// key=value DSN naming a host) rather than a MySQL/MariaDB DSN.
func IsPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") || strings.Contains(dsn, "host=")
}

// PoolerSafe returns dsn with pgx's simple protocol when it is a
// PostgreSQL DSN that names no default_query_exec_mode, as the ormlock
// command does: pgx's default (prepared statements it caches per
// connection) fails behind a transaction-mode PgBouncer before 1.21, and
// the demos send too few statements to gain from a cache. A DSN that names
// a mode, and a MySQL DSN, are returned as they are.
func PoolerSafe(dsn string) string {
	const mode = "default_query_exec_mode=simple_protocol"
	switch {
	case !IsPostgres(dsn) || strings.Contains(dsn, "default_query_exec_mode"):
		return dsn
	case strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://"):
		if strings.Contains(dsn, "?") {
			return dsn + "&" + mode
		}
		return dsn + "?" + mode
	default:
		return dsn + " " + mode
	}
}

// OpenGORM opens a GORM pool on dsn (see IsPostgres and PoolerSafe), with
// GORM's logger off: the examples print what they show themselves.
func OpenGORM(dsn string) (*gorm.DB, error) {
	var dial gorm.Dialector
	if IsPostgres(dsn) {
		dial = postgres.Open(PoolerSafe(dsn))
	} else {
		dial = mysql.Open(dsn)
	}
	return gorm.Open(dial, &gorm.Config{Logger: logger.Discard})
}

// CloseGORM closes db's pool.
func CloseGORM(db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	return sqlDB.Close()
}
