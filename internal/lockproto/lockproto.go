package lockproto

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"reflect"

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
//
// Marking it bad is not always enough: a driver connection that a pool of
// the driver's owns (pgx's database/sql driver over a pgx pool,
// stdlib.OpenDBFromPool, as pgxlock and a GORM or ent opened that way
// use) hands itself back to that pool when closed, and the pool keeps any
// connection that looks idle outside a transaction, session locks and
// all. So the connection under it is closed first (closeUnder).
func Destroy(c *sql.Conn) {
	_ = c.Raw(func(dc any) error {
		closeUnder(DriverConn(dc))
		return driver.ErrBadConn
	})
	_ = c.Close()
}

// closeUnder closes, at once, the connection under dc when dc reaches it
// by a method Conn() whose result has Close(ctx) (pgx's *stdlib.Conn and
// its *pgx.Conn, which pgx's pools destroy once closed), without importing
// the driver. An ended context makes pgx close the socket without waiting
// on the server. A driver connection without one is left as it is: its
// own Close, after ErrBadConn, ends it.
func closeUnder(dc any) {
	m := reflect.ValueOf(dc).MethodByName("Conn")
	if !m.IsValid() || m.Type().NumIn() != 0 || m.Type().NumOut() != 1 {
		return
	}
	v := m.Call(nil)[0]
	if (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) && v.IsNil() {
		return
	}
	under, ok := v.Interface().(interface{ Close(context.Context) error })
	if !ok {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = under.Close(ctx)
}
