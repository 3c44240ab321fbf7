package gormlock_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/faults"
	"github.com/ormlock/ormlock/internal/testdb"
)

// grace is how long after its deadline a call may return.
const grace = 2 * time.Second

// verb is one gormlock verb, called with a trivial fn.
type verb struct {
	name string
	call func(db *gorm.DB, key string) error
}

// verbs are the verbs a deadline must bound; ledger is RunOnce's table.
func verbs(ledger string) []verb {
	nop := func(*gorm.DB) error { return nil }
	return []verb{
		{"Transaction", func(db *gorm.DB, key string) error { return gormlock.Transaction(db, key, nop) }},
		{"TransactionWait", func(db *gorm.DB, key string) error {
			return gormlock.Transaction(db, key, nop, ormlock.WithWait(time.Minute))
		}},
		{"RunOnce", func(db *gorm.DB, key string) error {
			return gormlock.RunOnce(db, key, slotAt(0), nop, ormlock.WithLedgerTable(ledger), ormlock.WithWait(time.Minute))
		}},
		{"Session", func(db *gorm.DB, key string) error {
			return gormlock.Session(db, key, func(context.Context) error { return nil }, ormlock.WithWait(time.Minute))
		}},
	}
}

// notAcquiredByDeadline calls v with a deadline and checks that it returns
// within the deadline plus grace, with an error matching both
// ErrNotAcquired and context.DeadlineExceeded.
func notAcquiredByDeadline(t *testing.T, db *gorm.DB, v verb, key string, deadline time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	err := v.call(db.WithContext(ctx), key)
	faults.Within(t, v.name, start, deadline+grace)
	if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%s: %v, want ErrNotAcquired and DeadlineExceeded", v.name, err)
	}
}

// The pool's only connection is held elsewhere: every verb gives up at the
// caller's deadline, before the lock.
func TestDeadlinePoolExhausted(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, sqlDB := openGorm(t, k)
		ledger := ledgerTable(t, k, db)
		sqlDB.SetMaxOpenConns(1)
		conn, err := sqlDB.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range verbs(ledger) {
			notAcquiredByDeadline(t, db, v, "pool-"+t.Name()+v.name, 300*time.Millisecond)
		}
		_ = conn.Close()
	})
}

// A server that accepts TCP connections and never answers: the dial is cut
// by the deadline and classified as not acquired.
func TestDeadlineSilentServer(t *testing.T) {
	for _, dialect := range []string{"postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			addr := faults.Silent(t)
			var (
				sqlDB *sql.DB
				dial  gorm.Dialector
				err   error
			)
			if dialect == "postgres" {
				sqlDB, err = sql.Open("pgx", "postgres://u:p@"+addr+"/db?sslmode=disable")
				dial = postgres.New(postgres.Config{Conn: sqlDB})
			} else {
				sqlDB, err = sql.Open("mysql", "u:p@tcp("+addr+")/db")
				dial = mysql.New(mysql.Config{Conn: sqlDB, SkipInitializeWithVersion: true})
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sqlDB.Close() })
			db, err := gorm.Open(dial, &gorm.Config{Logger: logger.Discard, DisableAutomaticPing: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range verbs("ormlock_runs") {
				notAcquiredByDeadline(t, db, v, "silent", time.Second)
			}
			if n := sqlDB.Stats().InUse; n != 0 {
				t.Errorf("InUse = %d after the calls", n)
			}
		})
	}
}

// The backend of the pool's idle connection is frozen before the call:
// BEGIN never answers, and the deadline ends the wait.
func TestDeadlineFrozenIdleBackend(t *testing.T) {
	k := testdb.Postgres
	db, sqlDB := openGorm(t, k)
	ledger := ledgerTable(t, k, db)
	sqlDB.SetMaxIdleConns(1)
	for _, v := range verbs(ledger) {
		t.Run(v.name, func(t *testing.T) {
			resume := faults.Freeze(t, faults.PGBackendPID(t, sqlDB)) // the pool's one idle connection
			notAcquiredByDeadline(t, db, v, "frozen-"+t.Name(), time.Second)
			resume()
		})
	}
}

// The backend freezes while fn runs. fn returns nil before the deadline:
// the COMMIT is cut at the deadline (its outcome is unknown). fn returns
// after the deadline: the ROLLBACK is bounded and nothing is committed.
// Either way the lock is free once the backend resumes.
func TestDeadlineFrozenDuringFn(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		for _, iso := range []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelRepeatableRead} {
			for _, late := range []bool{false, true} {
				name := string(k) + "/" + iso.String()
				if late {
					name += "/fnPastDeadline"
				}
				t.Run(name, func(t *testing.T) {
					db, _ := openGorm(t, k)
					tbl := counterTable(t, k, db)
					key := "frozen-fn-" + t.Name()
					const deadline = 2 * time.Second
					ctx, cancel := context.WithTimeout(context.Background(), deadline)
					defer cancel()
					var resume func()
					start := time.Now()
					err := gormlock.Transaction(db.WithContext(ctx), key, func(tx *gorm.DB) error {
						var pid int
						if err := tx.Raw("SELECT pg_backend_pid()").Scan(&pid).Error; err != nil {
							return err
						}
						if err := tx.Exec("INSERT INTO " + tbl + " (n) VALUES (1)").Error; err != nil {
							return err
						}
						resume = faults.Freeze(t, pid)
						if late {
							<-ctx.Done()
						}
						return nil
					}, ormlock.WithTxOptions(&sql.TxOptions{Isolation: iso}))
					faults.Within(t, "Transaction", start, deadline+grace)
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("Transaction: %v, want DeadlineExceeded", err)
					}
					if errors.Is(err, ormlock.ErrNotAcquired) {
						t.Errorf("Transaction: %v: the lock was acquired", err)
					}
					if resume != nil {
						resume()
					}
					if late {
						var n int64
						if err := db.Raw("SELECT COUNT(*) FROM " + tbl).Scan(&n).Error; err != nil || n != 0 {
							t.Errorf("rows after a rollback: %d (%v), want 0", n, err)
						}
					}
				})
			}
		}
	}
}
