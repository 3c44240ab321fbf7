package gormlock_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// A server (or role, or connection) whose default_transaction_isolation is
// REPEATABLE READ, with no level asked for: the lock statement, the
// transaction's first, would take the snapshot before the lock. The
// one-message path reads the level with the lock and, seeing a
// snapshot-once level, takes the two-connection path at that level instead,
// so B still sees A's commit. Directly on PostgreSQL only: PgBouncer refuses
// the start-up parameter that sets the default here.
func TestTransactionServerDefaultIsolation(t *testing.T) {
	k := testdb.Postgres
	dsn := testdb.DSN(t, k)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	for _, level := range []string{"repeatable%20read", "serializable"} {
		t.Run(level, func(t *testing.T) {
			rr := dsn + sep + "default_transaction_isolation=" + level
			dbA, _ := openDSN(t, k, rr)
			dbB, _ := openDSN(t, k, rr)
			var got string
			if err := dbB.Raw("SELECT current_setting('transaction_isolation')").Scan(&got).Error; err != nil || got == "read committed" {
				t.Fatalf("the pool's default isolation is %q (%v); the test needs it above READ COMMITTED", got, err)
			}
			tbl := counterTable(t, k, dbA)
			key := "iso-default-" + t.Name()
			var wg sync.WaitGroup
			var errA, errB error
			wg.Go(func() {
				errA = gormlock.Transaction(dbA, key, func(tx *gorm.DB) error { return next(tx, tbl, 400*time.Millisecond) })
			})
			time.Sleep(100 * time.Millisecond)
			wg.Go(func() {
				errB = gormlock.Transaction(dbB, key, func(tx *gorm.DB) error {
					var iso string
					if err := tx.Raw("SELECT current_setting('transaction_isolation')").Scan(&iso).Error; err != nil {
						return err
					}
					if iso == "read committed" {
						t.Errorf("fn ran at %q, want the server's default level", iso)
					}
					return next(tx, tbl, 0)
				}, ormlock.WithWait(5*time.Second))
			})
			wg.Wait()
			if errA != nil || errB != nil {
				t.Fatalf("A: %v, B: %v; want both nil", errA, errB)
			}
			assertSequence(t, dbA, tbl, 2)
		})
	}
}
