package schedtest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/leakcheck"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/gormsched"
)

// A Lock whose context has already ended is a skip that sends nothing: the
// next Lock of the same slot on the same replica, at once, claims it (a
// cancelled Lock behind PgBouncer used to leave the slot's lock held for a
// moment, and the next Lock was refused as held by another holder).
func TestLockerCancelledContextThenLive(t *testing.T) {
	leakcheck.Goroutines(t)
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := openGorm(t, k)
		migrate(t, db)
		job := jobName(t)
		hourly := everyHour(t)
		for i := range 20 {
			slot := time.Date(2033, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Hour)
			l, err := scheduler.NewLocker(gormsched.Backend(db), hourly, scheduler.WithClock(fixed(slot)))
			if err != nil {
				t.Fatal(err)
			}
			ended, cancel := context.WithCancel(context.Background())
			cancel()
			if _, err := l.Lock(ended, job); !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
				t.Fatalf("round %d: Lock on a cancelled context: %v, want ErrNotAcquired and context.Canceled", i, err)
			}
			held, err := l.Lock(context.Background(), job)
			if err != nil {
				t.Fatalf("round %d: Lock right after a cancelled Lock: %v", i, err)
			}
			if err := held.Unlock(context.Background()); err != nil {
				t.Fatalf("round %d: Unlock: %v", i, err)
			}
		}
	})
}
