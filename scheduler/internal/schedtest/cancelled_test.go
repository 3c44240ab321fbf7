package schedtest_test

import (
	"context"
	"errors"
	"math/rand/v2"
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

// A Lock whose context ends mid-way, wherever the cancellation lands,
// leaves no lock held once it returns: the next Lock of the same slot on
// the same replica, at once, claims it (or finds it done, when the
// cancelled Lock had claimed it and its run was unlocked).
func TestLockerCancelledMidwayThenLive(t *testing.T) {
	leakcheck.Goroutines(t)
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := openGorm(t, k)
		migrate(t, db)
		job := jobName(t)
		hourly := everyHour(t)
		r := rand.New(rand.NewPCG(5, uint64(len(k))))
		var skips int
		for i := range 40 {
			slot := time.Date(2034, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Hour)
			l, err := scheduler.NewLocker(gormsched.Backend(db), hourly, scheduler.WithClock(fixed(slot)))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(time.Duration(r.Int64N(int64(4*time.Millisecond))), cancel)
			held, err := l.Lock(ctx, job)
			cancel()
			switch {
			case err == nil:
				if err := held.Unlock(ctx); err != nil {
					t.Fatalf("round %d: Unlock: %v", i, err)
				}
			case errors.Is(err, ormlock.ErrNotAcquired) && errors.Is(err, context.Canceled):
				skips++
			default:
				t.Fatalf("round %d: Lock cancelled mid-way: %v", i, err)
			}
			held, err = l.Lock(context.Background(), job)
			switch {
			case err == nil:
				if err := held.Unlock(context.Background()); err != nil {
					t.Fatalf("round %d: Unlock: %v", i, err)
				}
			case errors.Is(err, ormlock.ErrAlreadyDone):
			default:
				t.Fatalf("round %d: Lock right after a Lock cancelled mid-way: %v", i, err)
			}
		}
		t.Logf("%d of 40 Locks cancelled before the claim", skips)
	})
}
