package scheduler_test

import (
	"context"
	"errors"
	"log"

	"github.com/go-co-op/gocron/v2"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/scheduler"
)

// IsLeader reports ErrNotLeader on the replicas that stand by.
func ExampleElector_IsLeader() {
	var elector *scheduler.Elector
	if err := elector.IsLeader(context.Background()); errors.Is(err, scheduler.ErrNotLeader) {
		log.Print("standing by")
	}
}

// A gocron task wrapped by Task runs under its run's lock: ormlock.Held is
// true, ormlock.Slot reads the run's slot, and ctx ends with cause
// ormlock.ErrLockLost if the lock is lost.
func ExampleLocker_Task() {
	var locker *scheduler.Locker // scheduler.NewLocker(gormsched.Backend(db), at2)
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		log.Fatal(err)
	}
	report := func(ctx context.Context) error {
		if !ormlock.Held(ctx) { // ShedLock's assertLocked()
			return errors.New("nightly report: not under its lock")
		}
		slot, _ := ormlock.Slot(ctx)
		log.Printf("the report of %v", slot)
		return nil
	}
	_, err = s.NewJob(gocron.CronJob("0 0 2 * * *", true), gocron.NewTask(locker.Task("nightly-report", report)),
		gocron.WithName("nightly-report"))
	if err != nil {
		log.Fatal(err)
	}
}
