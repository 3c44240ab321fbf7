package sqllock

import (
	"database/sql"
	"database/sql/driver"

	"github.com/ormlock/ormlock/internal/lockproto"
)

// Wrap returns a connector of c's connections on which a [Transaction]
// costs the round trips of a plain transaction on PostgreSQL with pgx's
// driver: database/sql's own BEGIN, the one that begins fn's *sql.Tx,
// travels in one message with the lock (see the package doc, Two round
// trips). Every other use of the connections is c's own, untouched; on
// another driver (lib/pq, go-sql-driver/mysql) the wrapper changes
// nothing. A pool opened on it is an ordinary *sql.DB for the rest of the
// program: pass it wherever a *sql.DB goes. Closing the pool closes c
// when c is an io.Closer.
func Wrap(c driver.Connector) driver.Connector { return lockproto.WrapConnector(c) }

// OpenDB is sql.OpenDB on [Wrap](c):
//
//	db := sqllock.OpenDB(stdlib.GetConnector(*cfg)) // cfg from pgx.ParseConfig
func OpenDB(c driver.Connector) *sql.DB { return sql.OpenDB(Wrap(c)) }

// Open is sql.Open with the connections of [Wrap]: the driver registered
// as driverName (pgx's stdlib registers "pgx"), opened for dsn.
//
//	db, err := sqllock.Open("pgx", "postgres://app@db/app")
func Open(driverName, dsn string) (*sql.DB, error) {
	return lockproto.OpenWrapped(driverName, dsn)
}
