package sqllock

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/lockproto"
)

// dialectOf returns db's dialect: from its driver's type, or for a driver
// that hides its type (a wrapper such as otelsql or sqlhooks) by asking the
// server once per pool which it is (lockproto.DialectOfDB).
func dialectOf(ctx context.Context, verb string, db *sql.DB) (lockproto.Dialect, error) {
	d, ok, err := lockproto.DialectOfDB(ctx, db, nil)
	switch {
	case err != nil:
		return 0, errs.Join(fmt.Errorf("%w: sqllock.%s: driver %T is not one ormlock knows (pgx's stdlib, lib/pq, go-sql-driver/mysql), and asking the server which it is failed",
			ormlock.ErrUnsupportedDialect, verb, db.Driver()), errs.Wrap(err, "SELECT version()"))
	case !ok:
		return 0, fmt.Errorf("%w: sqllock.%s: driver %T is not one ormlock knows (pgx's stdlib, lib/pq, go-sql-driver/mysql), and its server is neither PostgreSQL nor MySQL/MariaDB",
			ormlock.ErrUnsupportedDialect, verb, db.Driver())
	}
	return d, nil
}
