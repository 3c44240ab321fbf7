package lockproto

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"

	"github.com/ormlock/ormlock/internal/errs"
)

// Dialect is the lock protocol family of a database.
type Dialect uint8

const (
	// Postgres covers PostgreSQL, directly or behind PgBouncer.
	Postgres Dialect = iota + 1
	// MySQL covers MySQL and MariaDB.
	MySQL
)

// String returns "postgres" or "mysql".
func (d Dialect) String() string {
	s, err := ServerOf(d)
	if err != nil {
		return "unknown"
	}
	return s.Name()
}

// DialectOf maps an ORM's dialect name to a Dialect. Names: "postgres",
// "pgx", "postgresql", "mysql" and "mariadb" (MariaDB uses the mysql name in
// both GORM and ent, but "mariadb" is accepted too). Anything else wraps
// errs.ErrUnsupportedDialect.
func DialectOf(name string) (Dialect, error) {
	switch name {
	case "postgres", "postgresql", "pgx":
		return Postgres, nil
	case "mysql", "mariadb":
		return MySQL, nil
	}
	return 0, fmt.Errorf("%w: %q (ormlock supports postgres and mysql/mariadb)", errs.ErrUnsupportedDialect, name)
}

// Querier is what the protocol needs of a connection or transaction:
// *sql.Conn, *sql.Tx and *sql.DB all satisfy it, and so do GORM's ConnPools.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Destroy closes a pinned connection so that it is never handed back to the
// pool: the driver connection is marked bad and closed, and the server frees
// whatever the session held. It is used when a release failed or could not be
// confirmed.
func Destroy(c *sql.Conn) {
	_ = c.Raw(func(any) error { return driver.ErrBadConn })
	_ = c.Close()
}
