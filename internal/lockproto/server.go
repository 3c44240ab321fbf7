package lockproto

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/ormlock/ormlock/internal/errs"
)

// Server is what depends on the database server whatever the lock: the
// fence table's SQL, Holder's and Holders' queries, the server check,
// error classification and the other facts of one family of servers
// (PostgreSQL, MySQL/MariaDB). There is one implementation per family,
// picked once from a Dialect by ServerOf, the one place that compares
// Dialect values; protocol and ledger code call its methods instead of
// branching on the dialect. A package above lockproto whose own SQL
// differs per server (the ledger) picks its per-server implementation
// with PerServer.
type Server interface {
	// Name is the Dialect's String: "postgres" or "mysql".
	Name() string
	// Quote quotes ident, a validated plain identifier.
	Quote(ident string) string
	// MissingTable reports whether err is the server's "no such table".
	MissingTable(err error) bool
	// MissingColumn reports whether err is the server's "no such column".
	MissingColumn(err error) bool
	// SerializationFailure reports whether err is a transaction's snapshot
	// that cannot see a concurrent write (PostgreSQL's serialization_failure
	// above READ COMMITTED; MySQL/MariaDB raise none such).
	SerializationFailure(err error) bool

	// index places the family in PerServer's arguments.
	index() int
	// product names the server by its version string (ServerProduct).
	product(version string) string
	// check asks the server whether it hands out real locks; verdict
	// judges the answers (detect.go).
	check(ctx context.Context, q CheckQuerier) (verdict func() (*serverFacts, error), err error)
	// implicitCommit reports whether the transaction q, on the pinned
	// connection conn (nil when unknown), was committed behind the
	// library's back (implicit.go).
	implicitCommit(ctx context.Context, conn *sql.Conn, q Querier) bool
	// autocommitOff reports whether o's lock connection runs with
	// autocommit off, so that a write on it needs a COMMIT.
	autocommitOff(o *Op) bool

	fenceServer
	holderServer
}

// ServerOf returns the Server of dialect d, or an error wrapping
// errs.ErrUnsupportedDialect.
func ServerOf(d Dialect) (Server, error) {
	switch d {
	case Postgres:
		return postgresServer{}, nil
	case MySQL:
		return mysqlServer{}, nil
	}
	return nil, fmt.Errorf("%w: dialect %d", errs.ErrUnsupportedDialect, d)
}

// PerServer returns postgres or mysql, whichever is s's family's: how a
// package above lockproto picks, once, its own implementation of what
// differs per server.
func PerServer[T any](s Server, postgres, mysql T) T {
	return [...]T{postgres, mysql}[s.index()]
}

// server is d's Server, for a dialect already validated (an Op's, by
// NewOp); nil for an unknown one.
func (d Dialect) server() Server {
	s, _ := ServerOf(d)
	return s
}

// postgresServer is PostgreSQL's, directly or behind PgBouncer.
type postgresServer struct{}

func (postgresServer) Name() string                        { return "postgres" }
func (postgresServer) Quote(ident string) string           { return `"` + ident + `"` }
func (postgresServer) MissingTable(err error) bool         { return SQLState(err) == "42P01" } // undefined_table
func (postgresServer) MissingColumn(err error) bool        { return SQLState(err) == "42703" } // undefined_column
func (postgresServer) SerializationFailure(err error) bool { return SQLState(err) == "40001" }
func (postgresServer) index() int                          { return 0 }
func (postgresServer) autocommitOff(*Op) bool              { return false }
func (postgresServer) product(version string) string       { return postgresProduct(version) }

func (postgresServer) check(ctx context.Context, q CheckQuerier) (func() (*serverFacts, error), error) {
	return checkPostgres(ctx, q, "")
}

// implicitCommit: PostgreSQL commits nothing behind the library's back.
func (postgresServer) implicitCommit(context.Context, *sql.Conn, Querier) bool { return false }

// mysqlServer is MySQL's and MariaDB's.
type mysqlServer struct{}

func (mysqlServer) Name() string                    { return "mysql" }
func (mysqlServer) Quote(ident string) string       { return "`" + ident + "`" }
func (mysqlServer) MissingTable(err error) bool     { return MySQLErrno(err) == 1146 } // ER_NO_SUCH_TABLE
func (mysqlServer) MissingColumn(err error) bool    { return MySQLErrno(err) == 1054 } // ER_BAD_FIELD_ERROR
func (mysqlServer) SerializationFailure(error) bool { return false }
func (mysqlServer) index() int                      { return 1 }
func (mysqlServer) autocommitOff(o *Op) bool        { return o.my.autocommit == 0 }
func (mysqlServer) product(version string) string   { return mysqlProduct(version) }

func (mysqlServer) check(ctx context.Context, q CheckQuerier) (func() (*serverFacts, error), error) {
	return checkMySQL(ctx, q)
}

func (mysqlServer) implicitCommit(ctx context.Context, conn *sql.Conn, q Querier) bool {
	in, err := mysqlInTx(ctx, conn, q)
	return err == nil && !in
}
