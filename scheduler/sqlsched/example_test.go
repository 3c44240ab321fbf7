package sqlsched_test

import (
	"context"
	"database/sql"
	"log"
	"time"

	"github.com/go-co-op/gocron/v2"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/sqlsched"
	"github.com/ormlock/ormlock/sqllock"
)

func settle() { /* the job */ }

// The same adapters on a *sql.DB (database/sql, sqlc; sqlx's db.DB, bun's
// db.DB).
func ExampleBackend() {
	db, err := sql.Open("pgx", "postgres://app@localhost/app")
	if err != nil {
		log.Fatal(err)
	}
	if err := sqllock.Migrate(context.Background(), db); err != nil { // the ledger table
		log.Fatal(err)
	}
	midnight, _ := ormlock.Cron("@midnight", time.UTC)
	locker, err := scheduler.NewLocker(sqlsched.Backend(db, ormlock.WithOwner("replica-a")), midnight)
	if err != nil {
		log.Fatal(err)
	}
	s, _ := gocron.NewScheduler(gocron.WithDistributedLocker(locker), gocron.WithGlobalJobOptions(locker.RecordFailures()))
	_, _ = s.NewJob(gocron.CronJob("0 0 * * *", false), gocron.NewTask(settle), gocron.WithName("daily-settlement"))
	s.Start()
}
