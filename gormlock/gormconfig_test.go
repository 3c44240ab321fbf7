package gormlock_test

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/plugin/dbresolver"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/stmtlog"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/gormtest"
	"github.com/ormlock/ormlock/keyhash"
)

// GORM configurations that change the connection or the statements gormlock
// gets: dbresolver's replicas, and the statement cache (PrepareStmt).

// openReplica opens a pool on a second database of the same server, standing
// in for a read replica: PostgreSQL advisory locks are per database, so a
// lock taken there would not exclude holders on the primary database.
func openReplica(t *testing.T, k testdb.Kind) gorm.Dialector {
	t.Helper()
	admin := testdb.AdminDB(t, k)
	if k.Dialect() == "postgres" {
		var exists bool
		if err := admin.QueryRow("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'ormlock_replica')").Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if !exists {
			if _, err := admin.Exec("CREATE DATABASE ormlock_replica"); err != nil {
				t.Fatal(err)
			}
		}
	} else if _, err := admin.Exec("CREATE DATABASE IF NOT EXISTS ormlock_replica"); err != nil {
		t.Fatal(err)
	}
	dsn := testdb.DSN(t, k)
	rdsn := strings.Replace(dsn, "/ormlock?", "/ormlock_replica?", 1)
	if rdsn == dsn {
		t.Fatalf("cannot derive a replica DSN from %q", dsn)
	}
	driver := "pgx"
	if k.Dialect() == "mysql" {
		driver = "mysql"
	}
	rdb, err := sql.Open(driver, rdsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, rdb) })
	if k.Dialect() == "postgres" {
		return postgres.New(postgres.Config{Conn: rdb})
	}
	return mysql.New(mysql.Config{Conn: rdb, SkipInitializeWithVersion: true})
}

func TestTransactionWithDBResolver(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
		t.Run(string(k), func(t *testing.T) {
			for _, prepare := range []bool{false, true} {
				t.Run(fmt.Sprintf("PrepareStmt=%v", prepare), func(t *testing.T) {
					db, _ := gormtest.Open(t, k, &gorm.Config{PrepareStmt: prepare})
					if err := db.Use(dbresolver.Register(dbresolver.Config{Replicas: []gorm.Dialector{openReplica(t, k)}})); err != nil {
						t.Fatal(err)
					}
					key := "resolver-" + t.Name()
					// sanity: without a transaction, a raw SELECT goes to the replica
					var where string
					if err := db.Raw(currentDB(k)).Scan(&where).Error; err != nil || where != "ormlock_replica" {
						t.Fatalf("replica routing not in effect: %q %v", where, err)
					}
					for _, base := range []*gorm.DB{db, db.Clauses(dbresolver.Read)} {
						err := gormlock.Transaction(base, key, func(tx *gorm.DB) error {
							var dbname string
							if err := tx.Raw(currentDB(k)).Scan(&dbname).Error; err != nil {
								return err
							}
							if dbname != "ormlock" {
								return fmt.Errorf("fn's statements ran on %q, want the primary", dbname)
							}
							if k.Dialect() == "postgres" {
								if rawFree(t, k, key) {
									return errors.New("lock not held on the primary database")
								}
								return nil
							}
							var same bool
							if err := tx.Raw("SELECT IS_USED_LOCK(?) = CONNECTION_ID()", keyhash.MySQLName("", key)).Scan(&same).Error; err != nil {
								return err
							}
							if !same {
								return errors.New("lock and transaction on different connections")
							}
							return nil
						})
						if err != nil {
							t.Fatal(err)
						}
					}
				})
			}
		})
	}
}

func currentDB(k testdb.Kind) string {
	if k.Dialect() == "postgres" {
		return "SELECT current_database()"
	}
	return "SELECT DATABASE()"
}

// GORM's statement cache (PrepareStmt) needs a *sql.Tx: gormlock.Transaction
// falls back to BEGIN, then the lock, then COMMIT, three statements in
// PostgreSQL's own log, directly and behind PgBouncer. The round trips every
// adapter shares are TestTransactionRoundTrips in internal/conformance.
func TestTransactionRoundTripsPrepareStmt(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			sl := stmtlog.Start(t, k)
			sqlDB := sl.Open(t)
			db := gormtest.On(t, k.Dialect(), sqlDB)
			t.Cleanup(func() { testdb.AssertNoLeaks(t, k, sqlDB) })
			name := "rt-" + t.Name()
			prepared := db.Session(&gorm.Session{PrepareStmt: true})
			lines := sl.Count(t, func() error { return gormlock.Transaction(prepared, name, func(*gorm.DB) error { return nil }) })
			t.Logf("%d round trips: %q", len(lines), lines)
			if len(lines) != 3 {
				t.Errorf("%d statements in the server log, want 3 (BEGIN, then the lock, then COMMIT): %q", len(lines), lines)
			}
		})
	}
}

// With PrepareStmt (GORM's statement cache) Transaction holds the lock
// while fn's statements run, call after call.
func TestTransactionPrepareStmt(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
		t.Run(string(k), func(t *testing.T) {
			db, _ := gormtest.Open(t, k, &gorm.Config{PrepareStmt: true})
			tbl := table(t, k, db)
			key := "prep-" + t.Name()
			for i := range 3 {
				err := gormlock.Transaction(db, key, func(tx *gorm.DB) error {
					if rawFree(t, k, key) {
						return errors.New("lock not held")
					}
					return tx.Exec("INSERT INTO "+tbl+" (id) VALUES (?)", i).Error
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			if n := count(t, db, tbl); n != 3 {
				t.Fatalf("rows = %d", n)
			}
		})
	}
}

// With PrepareStmt the ledger statements bypass GORM's statement cache, as
// the lock statements do.
func TestRunOncePrepareStmt(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
		t.Run(string(k), func(t *testing.T) {
			db, _ := gormtest.Open(t, k, &gorm.Config{PrepareStmt: true})
			tbl := ledgerTable(t, k, db)
			work := table(t, k, db)
			job := "prep-" + t.Name()
			for i, mode := range []ormlock.Option{nil, ormlock.WithClaim(), nil} {
				err := gormlock.RunOnce(db, job, testdb.Slot(i%2), func(tx *gorm.DB) error {
					return tx.Exec("INSERT INTO "+work+" (id) VALUES (?)", i).Error
				}, ormlock.WithLedgerTable(tbl), mode)
				if i == 2 {
					if !errors.Is(err, ormlock.ErrAlreadyDone) {
						t.Fatalf("third run: %v", err)
					}
				} else if err != nil {
					t.Fatal(err)
				}
			}
			if n := count(t, db, work); n != 2 {
				t.Fatalf("work rows = %d, want 2", n)
			}
		})
	}
}
