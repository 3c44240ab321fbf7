package sqllock

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"weak"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/lockproto"
)

// driverDialects maps the package path of a database/sql driver type to its
// dialect. The type is looked at, never imported: a program links only the
// driver it uses.
var driverDialects = map[string]lockproto.Dialect{
	"github.com/jackc/pgx/v5/stdlib": lockproto.Postgres,
	"github.com/jackc/pgx/v4/stdlib": lockproto.Postgres,
	"github.com/lib/pq":              lockproto.Postgres,
	"github.com/go-sql-driver/mysql": lockproto.MySQL,
}

// probed holds the dialects found by asking the server, per pool (weakly:
// a pool that is garbage collected leaves the cache).
var probed sync.Map // weak.Pointer[sql.DB] -> lockproto.Dialect

// dialectOf returns db's dialect: from its driver's type, or for a driver
// that hides its type (a wrapper such as otelsql or sqlhooks) by asking the
// server once per pool which it is (see probe).
func dialectOf(ctx context.Context, verb string, db *sql.DB) (lockproto.Dialect, error) {
	drv := db.Driver()
	t := reflect.TypeOf(drv)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil {
		if d, ok := driverDialects[t.PkgPath()]; ok {
			return d, nil
		}
	}
	wp := weak.Make(db)
	if d, ok := probed.Load(wp); ok {
		return d.(lockproto.Dialect), nil
	}
	d, err := probe(ctx, db)
	if err != nil {
		return 0, errs.Join(fmt.Errorf("%w: sqllock.%s: driver %T is not one ormlock knows (pgx's stdlib, lib/pq, go-sql-driver/mysql), and asking the server which it is failed",
			ormlock.ErrUnsupportedDialect, verb, drv), err)
	}
	if d == 0 {
		return 0, fmt.Errorf("%w: sqllock.%s: driver %T is not one ormlock knows (pgx's stdlib, lib/pq, go-sql-driver/mysql), and its server is neither PostgreSQL nor MySQL/MariaDB",
			ormlock.ErrUnsupportedDialect, verb, drv)
	}
	if _, loaded := probed.LoadOrStore(wp, d); !loaded {
		runtime.AddCleanup(db, func(wp weak.Pointer[sql.DB]) { probed.Delete(wp) }, wp)
	}
	return d, nil
}

// probe asks db's server for version(), which PostgreSQL (and CockroachDB)
// answer with their name, and MySQL and MariaDB with a number first
// ("8.0.36", "10.11.6-MariaDB"). It returns 0 for any other answer.
func probe(ctx context.Context, db *sql.DB) (lockproto.Dialect, error) {
	var v string
	if err := db.QueryRowContext(ctx, "SELECT version()").Scan(&v); err != nil {
		return 0, errs.Wrap(err, "SELECT version()")
	}
	lv := strings.ToLower(v)
	switch {
	case strings.Contains(lv, "postgresql"), strings.Contains(lv, "cockroachdb"):
		return lockproto.Postgres, nil
	case v != "" && v[0] >= '0' && v[0] <= '9':
		return lockproto.MySQL, nil
	}
	return 0, nil
}
