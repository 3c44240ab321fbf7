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

	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/gormtest"
	"github.com/ormlock/ormlock/keyhash"
)

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
