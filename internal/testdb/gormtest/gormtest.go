// Package gormtest opens GORM on the test servers of internal/testdb, for
// the tests of gormlock, internal/conformance and chaos: one way to wrap a
// pool in GORM, written once. It is a package of its own, like
// internal/enttest, so that tests which do not use GORM (entlock's) do not
// import it through internal/testdb.
package gormtest

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"testing"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/ormlock/ormlock/internal/testdb"
)

// NoPing is the configuration for a pool that must not be touched when
// GORM opens: no ping, no version query (a silent server, a pool whose
// connections a test counts).
func NoPing() *gorm.Config {
	return &gorm.Config{Logger: logger.Discard, DisableAutomaticPing: true}
}

// Open opens a new pool on the shared server of kind k, wrapped in GORM with
// cfg (see On), and asserts after the test that no lock and no connection
// leaked (testdb.AssertNoLeaks).
func Open(tb testing.TB, k testdb.Kind, cfg ...*gorm.Config) (*gorm.DB, *sql.DB) {
	tb.Helper()
	sqlDB := testdb.Open(tb, k)
	db := On(tb, k.Dialect(), sqlDB, cfg...)
	tb.Cleanup(func() { testdb.AssertNoLeaks(tb, k, sqlDB) })
	return db, sqlDB
}

// On wraps sqlDB, a pool of dialect ("postgres" or "mysql"), in GORM with
// cfg[0] (its Logger defaults to logger.Discard), or with a quiet logger and
// GORM's defaults when cfg is empty. MySQL/MariaDB skip GORM's version query.
func On(tb testing.TB, dialect string, sqlDB *sql.DB, cfg ...*gorm.Config) *gorm.DB {
	tb.Helper()
	c := &gorm.Config{Logger: logger.Discard}
	if len(cfg) > 0 {
		c = cfg[0]
		if c.Logger == nil {
			c.Logger = logger.Discard
		}
	}
	var dial gorm.Dialector
	if dialect == "postgres" {
		dial = postgres.New(postgres.Config{Conn: sqlDB})
	} else {
		dial = mysql.New(mysql.Config{Conn: sqlDB, SkipInitializeWithVersion: true})
	}
	// A PgBouncer in front of a server whose backends an earlier test
	// terminated hands each of its dead server connections to one more
	// client before it notices; database/sql's retries of GORM's ping can
	// all meet such connections, so the ping is tried a few more times
	// (each failed attempt makes PgBouncer drop the dead connection).
	var db *gorm.DB
	var err error
	for range 5 {
		if db, err = gorm.Open(dial, c); !errors.Is(err, driver.ErrBadConn) {
			break
		}
	}
	if err != nil {
		tb.Fatalf("gormtest: gorm.Open: %v", err)
	}
	return db
}
