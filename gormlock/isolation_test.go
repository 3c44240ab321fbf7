package gormlock_test

import (
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// isolations are the levels above READ COMMITTED, where PostgreSQL takes a
// transaction's snapshot at its first statement.
var isolations = []struct {
	name  string
	level sql.IsolationLevel
}{
	{"RepeatableRead", sql.LevelRepeatableRead},
	{"Serializable", sql.LevelSerializable},
}

// counterTable creates a table of plain ints (no unique constraint, so a
// stale read shows up as a duplicate rather than as an error).
func counterTable(t *testing.T, k testdb.Kind, db *gorm.DB) string {
	t.Helper()
	name := "c_" + keyhashHex(t.Name())
	if err := db.Exec("CREATE TABLE " + name + " (n INT NOT NULL)").Error; err != nil {
		t.Fatalf("create table: %v", err)
	}
	t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE " + name) })
	return name
}

// next is the critical section: read the largest n, insert n+1.
func next(tx *gorm.DB, table string, hold time.Duration) error {
	var n int64
	if err := tx.Raw("SELECT COALESCE(MAX(n), 0) FROM " + table).Scan(&n).Error; err != nil {
		return err
	}
	time.Sleep(hold)
	return tx.Exec("INSERT INTO "+table+" (n) VALUES (?)", n+1).Error
}

// assertSequence checks that the table holds 1..want, each once.
func assertSequence(t *testing.T, db *gorm.DB, table string, want int) {
	t.Helper()
	var total, distinct, top int64
	if err := db.Raw("SELECT COUNT(*), COUNT(DISTINCT n), COALESCE(MAX(n), 0) FROM "+table).Row().Scan(&total, &distinct, &top); err != nil {
		t.Fatal(err)
	}
	if total != int64(want) || distinct != total || top != total {
		t.Fatalf("rows %d, distinct %d, max %d; want 1..%d each once (a holder read a stale snapshot)", total, distinct, top, want)
	}
}

func TestTransactionIsolationWait(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		for _, iso := range isolations {
			t.Run(iso.name, func(t *testing.T) {
				dbA, _ := openGorm(t, k)
				dbB, _ := openGorm(t, k)
				tbl := counterTable(t, k, dbA)
				key := "iso-wait-" + t.Name()
				txo := ormlock.WithTxOptions(&sql.TxOptions{Isolation: iso.level})
				var wg sync.WaitGroup
				var errA, errB error
				wg.Go(func() {
					errA = gormlock.Transaction(dbA, key, func(tx *gorm.DB) error { return next(tx, tbl, 400*time.Millisecond) }, txo)
				})
				time.Sleep(100 * time.Millisecond)
				wg.Go(func() {
					errB = gormlock.Transaction(dbB, key, func(tx *gorm.DB) error { return next(tx, tbl, 0) }, txo, ormlock.WithWait(5*time.Second))
				})
				wg.Wait()
				if errA != nil || errB != nil {
					t.Fatalf("A: %v, B: %v; want both nil", errA, errB)
				}
				assertSequence(t, dbA, tbl, 2)
			})
		}
	})
}

func TestTransactionIsolationTryOnce(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		for _, iso := range isolations {
			t.Run(iso.name, func(t *testing.T) {
				const pools, rounds = 3, 40
				var dbs []*gorm.DB
				for range pools {
					db, _ := openGorm(t, k)
					dbs = append(dbs, db)
				}
				tbl := counterTable(t, k, dbs[0])
				key := "iso-try-" + t.Name()
				txo := ormlock.WithTxOptions(&sql.TxOptions{Isolation: iso.level})
				var mu sync.Mutex
				won := 0
				var wg sync.WaitGroup
				for _, db := range dbs {
					wg.Go(func() {
						for range rounds {
							err := gormlock.Transaction(db, key, func(tx *gorm.DB) error { return next(tx, tbl, 0) }, txo)
							switch {
							case err == nil:
								mu.Lock()
								won++
								mu.Unlock()
							case errors.Is(err, ormlock.ErrNotAcquired):
							default:
								t.Errorf("Transaction: %v", err)
								return
							}
						}
					})
				}
				wg.Wait()
				if won == 0 {
					t.Fatal("no call took the lock")
				}
				assertSequence(t, dbs[0], tbl, won)
			})
		}
	})
}

func TestRunOnceIsolationWait(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		for _, iso := range isolations {
			t.Run(iso.name, func(t *testing.T) {
				dbA, _ := openGorm(t, k)
				dbB, _ := openGorm(t, k)
				ledger := ormlock.WithLedgerTable(ledgerTable(t, k, dbA))
				tbl := counterTable(t, k, dbA)
				job := "iso-runonce-" + keyhashHex(t.Name())
				slot := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
				txo := ormlock.WithTxOptions(&sql.TxOptions{Isolation: iso.level})
				var wg sync.WaitGroup
				var errA, errB error
				ranB := false
				wg.Go(func() {
					errA = gormlock.RunOnce(dbA, job, slot, func(tx *gorm.DB) error { return next(tx, tbl, 400*time.Millisecond) }, txo, ledger)
				})
				time.Sleep(100 * time.Millisecond)
				wg.Go(func() {
					errB = gormlock.RunOnce(dbB, job, slot, func(tx *gorm.DB) error { ranB = true; return next(tx, tbl, 0) }, txo, ledger, ormlock.WithWait(5*time.Second))
				})
				wg.Wait()
				if errA != nil || !errors.Is(errB, ormlock.ErrAlreadyDone) || ranB {
					t.Fatalf("A: %v; B: %v (fn ran: %v); want nil and ErrAlreadyDone without running", errA, errB, ranB)
				}
				assertSequence(t, dbA, tbl, 1)
			})
		}
	})
}

// Above READ COMMITTED the lock lives on its own connection: when that
// connection dies while fn runs, fn's transaction is rolled back before
// COMMIT and the error wraps ErrLockLost.
func TestSnapshotIsolationLockLostBeforeCommit(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			db, _ := openGorm(t, k)
			tbl := counterTable(t, k, db)
			key := "lost-" + t.Name()
			err := gormlock.Transaction(db, key, func(tx *gorm.DB) error {
				if err := tx.Exec("INSERT INTO " + tbl + " (n) VALUES (1)").Error; err != nil {
					return err
				}
				h, err := gormlock.Holder(db, key)
				if err != nil || !h.Held {
					return errors.Join(errors.New("holder not found"), err)
				}
				var ok bool
				return testdb.AdminDB(t, k).QueryRow("SELECT pg_terminate_backend($1)", h.PID).Scan(&ok)
			}, ormlock.WithTxOptions(&sql.TxOptions{Isolation: sql.LevelRepeatableRead}))
			if !errors.Is(err, ormlock.ErrLockLost) {
				t.Fatalf("Transaction: %v, want ErrLockLost", err)
			}
			assertSequence(t, db, tbl, 0)
		})
	}
}
