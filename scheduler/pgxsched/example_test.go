package pgxsched_test

import (
	"context"
	"log"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/pgxlock"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/pgxsched"
)

func settle() { /* the job */ }

// The same adapters on pgx's own pool.
func ExampleBackend() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@localhost/app")
	if err != nil {
		log.Fatal(err)
	}
	if err := pgxlock.Migrate(ctx, pool); err != nil { // the ledger table
		log.Fatal(err)
	}
	midnight, _ := ormlock.Cron("@midnight", time.UTC)
	locker, err := scheduler.NewLocker(pgxsched.Backend(pool, ormlock.WithOwner("replica-a")), midnight)
	if err != nil {
		log.Fatal(err)
	}
	s, _ := gocron.NewScheduler(gocron.WithDistributedLocker(locker), gocron.WithGlobalJobOptions(locker.RecordFailures()))
	_, _ = s.NewJob(gocron.CronJob("0 0 * * *", false), gocron.NewTask(settle), gocron.WithName("daily-settlement"))
	s.Start()
}
