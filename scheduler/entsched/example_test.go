package entsched_test

import (
	"context"
	"database/sql"
	"log"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/go-co-op/gocron/v2"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/entsched"
)

func settle() { /* the job */ }

// The same adapters on an ent client built on entlock.Wrap.
func ExampleBackend() {
	db, err := sql.Open("pgx", "postgres://app@localhost/app")
	if err != nil {
		log.Fatal(err)
	}
	client := ent.NewClient(ent.Driver(entlock.Wrap(entsql.OpenDB(dialect.Postgres, db))))
	if err := entlock.Migrate(context.Background(), client); err != nil {
		log.Fatal(err)
	}
	midnight, _ := ormlock.Cron("@midnight", time.UTC)
	locker, err := scheduler.NewLocker(entsched.Backend(client, ormlock.WithOwner("replica-a")), midnight)
	if err != nil {
		log.Fatal(err)
	}
	s, _ := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	_, _ = s.NewJob(gocron.CronJob("0 0 * * *", false), gocron.NewTask(settle), gocron.WithName("daily-settlement"))
	s.Start()
}
