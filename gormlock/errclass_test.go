package gormlock_test

import (
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/gormtest"
	"github.com/ormlock/ormlock/internal/testdb"
)

// A server statement timeout shorter than the wait, the lock held
// elsewhere: not acquired, with the server's error kept in the chain.
func TestStatementTimeoutIsNotAcquired(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		key := "stmt-timeout-" + t.Name()
		release := rawHold(t, k, key)
		defer release()
		wait := ormlock.WithWait(5 * time.Second)
		nop := func(*gorm.DB) error { return nil }
		var err error
		switch k {
		case testdb.Postgres, testdb.MariaDB:
			param := "statement_timeout=300"
			if k == testdb.MariaDB {
				param = "max_statement_time=0.3"
			}
			sqlDB, oerr := sql.Open(map[string]string{"postgres": "pgx", "mysql": "mysql"}[k.Dialect()], withParam(t, testdb.DSN(t, k), param))
			if oerr != nil {
				t.Fatal(oerr)
			}
			t.Cleanup(func() { testdb.AssertNoLeaks(t, k, sqlDB); _ = sqlDB.Close() })
			err = gormlock.Transaction(gormtest.On(t, k.Dialect(), sqlDB), key, nop, wait)
		default: // PgBouncer refuses the startup parameter: set it in an outer transaction
			db, _ := gormtest.Open(t, k)
			err = db.Transaction(func(tx *gorm.DB) error {
				if err := tx.Exec("SET LOCAL statement_timeout = 300").Error; err != nil {
					return err
				}
				return gormlock.Transaction(tx, key, nop, wait)
			})
		}
		if !errors.Is(err, ormlock.ErrNotAcquired) {
			t.Fatalf("Transaction: %v, want ErrNotAcquired", err)
		}
		var state interface{ SQLState() string }
		var me *gomysql.MySQLError
		if !(errors.As(err, &state) && state.SQLState() == "57014") && !(errors.As(err, &me) && me.Number == 1969) &&
			!(k == testdb.MariaDB && strings.Contains(err.Error(), "GET_LOCK returned NULL")) {
			t.Fatalf("Transaction: %v, want the server's timeout error in the chain", err)
		}
	})
}

// A wait longer than PostgreSQL's largest lock_timeout (about 24.8 days)
// is clamped, not refused.
func TestWaitBeyondLockTimeoutMax(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := gormtest.Open(t, k)
		ran := false
		err := gormlock.Transaction(db, "long-wait-"+t.Name(), func(*gorm.DB) error { ran = true; return nil },
			ormlock.WithWait(30*24*time.Hour))
		if err != nil || !ran {
			t.Fatalf("Transaction: %v (ran %v)", err, ran)
		}
	})
}

// Nested in a REPEATABLE READ transaction, whose snapshot predates the lock:
// refused before fn runs.
func TestNestedSnapshotIsolationRefused(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			db, _ := gormtest.Open(t, k)
			ran := false
			err := db.Transaction(func(tx *gorm.DB) error {
				return gormlock.Transaction(tx, "nested-rr-"+t.Name(), func(*gorm.DB) error { ran = true; return nil })
			}, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
			if !errors.Is(err, ormlock.ErrInvalidArgument) || ran {
				t.Fatalf("nested Transaction: %v (ran %v), want ErrInvalidArgument", err, ran)
			}
		})
	}
}
