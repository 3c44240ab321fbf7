package gormlock_test

import (
	"context"
	"errors"
	"log"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
)

// A long job behind PgBouncer in transaction mode, or on a Galera cluster:
// the lock is a lease, a row renewed while the job runs, and no connection
// is held meanwhile. The fencing token is the lease's epoch; ctx is
// cancelled with ErrLockLost before anyone else can take the lease over.
func ExampleSession_lease() {
	var db *gorm.DB // opened elsewhere; gormlock.Migrate has created the lease table
	err := gormlock.Session(db, "monthly-report", func(ctx context.Context) error {
		epoch, _ := ormlock.FencingToken(ctx)
		return db.WithContext(ctx).Exec("UPDATE reports SET fence = ? WHERE month = '2026-12' AND fence <= ?", epoch, epoch).Error
	}, ormlock.WithLease(time.Minute))
	switch {
	case errors.Is(err, ormlock.ErrNotAcquired):
		log.Print("another replica holds the lease")
	case errors.Is(err, ormlock.ErrLockLost):
		log.Print("the lease was lost: the job stopped")
	case err != nil:
		log.Fatal(err)
	}
}
