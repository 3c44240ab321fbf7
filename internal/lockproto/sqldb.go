package lockproto

import (
	"context"
	"database/sql"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"weak"
)

// What the core tells of a *sql.DB it is handed with no dialect (sqllock's
// pool, the web view's): the dialect, from the driver's type or the
// server's answer. One body for every reader of a plain pool.

// driverDialects maps the package path of a database/sql driver type to its
// dialect. The type is looked at, never imported: a program links only the
// driver it uses.
var driverDialects = map[string]Dialect{
	"github.com/jackc/pgx/v5/stdlib": Postgres,
	"github.com/jackc/pgx/v4/stdlib": Postgres,
	"github.com/lib/pq":              Postgres,
	"github.com/go-sql-driver/mysql": MySQL,
}

// probed holds the dialects found by asking the server, per pool (weakly:
// a pool that is garbage collected leaves the cache).
var probed sync.Map // weak.Pointer[sql.DB] -> Dialect

// DialectOfDB returns db's dialect: from its driver's type, or, for a
// driver that hides its type (a wrapper such as otelsql or sqlhooks), by
// asking the server once per pool (see probeDialect). ask runs the
// question: it calls query with a querier on db, and returns its error
// (the web view asks in a read-only transaction); a nil ask sends it on
// db. ok is false, with a nil error, when the server is neither
// PostgreSQL nor MySQL/MariaDB; err is the error of asking.
func DialectOfDB(ctx context.Context, db *sql.DB, ask func(query func(q CheckQuerier) error) error) (Dialect, bool, error) {
	t := reflect.TypeOf(unwrapDriver(db.Driver()))
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil {
		if d, ok := driverDialects[t.PkgPath()]; ok {
			return d, true, nil
		}
	}
	return probedDialectOf(ctx, db, ask)
}

// probedDialectOf is DialectOfDB for a driver that hides its type: a
// function of its own, so that the closures that capture its results
// cost the known drivers' path nothing (no allocation).
func probedDialectOf(ctx context.Context, db *sql.DB, ask func(query func(q CheckQuerier) error) error) (d Dialect, ok bool, err error) {
	wp := weak.Make(db)
	if d, ok := probed.Load(wp); ok {
		return d.(Dialect), true, nil
	}
	if ask == nil {
		ask = func(query func(q CheckQuerier) error) error { return query(db) }
	}
	if err := ask(func(q CheckQuerier) error { d, ok, err = probeDialect(ctx, q); return err }); err != nil || !ok {
		return 0, false, err
	}
	if _, loaded := probed.LoadOrStore(wp, d); !loaded {
		runtime.AddCleanup(db, func(wp weak.Pointer[sql.DB]) { probed.Delete(wp) }, wp)
	}
	return d, true, nil
}

// probeDialect asks q's server for version(), which PostgreSQL (and
// CockroachDB) answer with their name, and MySQL and MariaDB with a number
// first ("8.0.36", "10.11.6-MariaDB"); ok is false for any other answer.
func probeDialect(ctx context.Context, q CheckQuerier) (d Dialect, ok bool, err error) {
	var v string
	if err := q.QueryRowContext(ctx, "SELECT version()").Scan(&v); err != nil {
		return 0, false, err
	}
	lv := strings.ToLower(v)
	switch {
	case strings.Contains(lv, "postgresql"), strings.Contains(lv, "cockroachdb"):
		return Postgres, true, nil
	case v != "" && v[0] >= '0' && v[0] <= '9':
		return MySQL, true, nil
	}
	return 0, false, nil
}

// products are the dialects' names for a reader: "PostgreSQL",
// "MySQL/MariaDB".
var products = [...]string{Postgres: "PostgreSQL", MySQL: "MySQL/MariaDB"}

// Product returns the name of the servers of d for a reader:
// "PostgreSQL" or "MySQL/MariaDB" ("" for no dialect).
func (d Dialect) Product() string {
	if int(d) < len(products) {
		return products[d]
	}
	return ""
}

// IsMissingTable reports whether err is the server's "no such table"
// (PostgreSQL's SQLSTATE 42P01, MySQL/MariaDB's error 1146).
func IsMissingTable(err error) bool {
	return SQLState(err) == "42P01" || MySQLErrno(err) == 1146
}

// LazyDB is a *sql.DB opened on first use (Op.LazyDB; pgxlock's, which
// internal/verbs' Pool.Lazy hands over): DB opens it, the queries of the
// server check run on it, and Close gives back what it opened. One that
// also has a method SharedDB() *sql.DB gives with it the *sql.DB under
// which its pool's shared lock connections live (sharedDB).
type LazyDB interface {
	DB() *sql.DB
	Close()
	CheckQuerier
}

// sqlDB is db, or when db is nil the *sql.DB o.LazyDB opens (pgxlock's
// Transaction, Session and Lead are given none: their lock connection
// comes from o.LockConns, and only the paths that need database/sql open
// it).
func sqlDB(o *Op, db *sql.DB) *sql.DB {
	if db == nil && o.LazyDB != nil {
		return o.LazyDB.DB()
	}
	return db
}

// sharedDB is sqlDB for the shared lock connections, which live under
// a *sql.DB as long as it is open: when db is nil, the one o.LazyDB shares
// between the calls on its pool, if it has one (pgxlock's, per pool while
// any call uses it).
func sharedDB(o *Op, db *sql.DB) *sql.DB {
	if s, ok := o.LazyDB.(interface{ SharedDB() *sql.DB }); ok && db == nil {
		return s.SharedDB()
	}
	return sqlDB(o, db)
}
