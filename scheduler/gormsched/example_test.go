package gormsched_test

import (
	"context"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/go-co-op/gocron/v2"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/robfig/cron/v3"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/gormsched"
)

func settle() { /* the job */ }

// Every replica runs the same gocron scheduler; each midnight (Berlin time)
// exactly one of them settles the day, and the ledger says which.
func ExampleBackend() {
	db, err := gorm.Open(postgres.Open("postgres://app@localhost/app"))
	if err != nil {
		log.Fatal(err)
	}
	host, _ := os.Hostname()
	if err := db.Use(gormlock.New(ormlock.WithOwner(host))); err != nil {
		log.Fatal(err)
	}
	if err := gormlock.Migrate(db); err != nil { // the ledger table
		log.Fatal(err)
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		log.Fatal(err)
	}
	midnight, err := ormlock.Cron("0 0 * * *", berlin) // the gocron job's spec, for ormlock
	if err != nil {
		log.Fatal(err)
	}
	locker, err := scheduler.NewLocker(gormsched.Backend(db), midnight)
	if err != nil {
		log.Fatal(err)
	}
	s, err := gocron.NewScheduler(gocron.WithLocation(berlin), gocron.WithDistributedLocker(locker))
	if err != nil {
		log.Fatal(err)
	}
	// locker.Task runs the job under its run's lock: ctx is held, carries
	// the slot, and ends with cause ormlock.ErrLockLost if the lock is lost
	settleDay := func(ctx context.Context) error {
		slot, _ := ormlock.Slot(ctx)
		return db.WithContext(ctx).Exec("INSERT INTO settlements (day) VALUES (?)", slot).Error
	}
	if _, err := s.NewJob(gocron.CronJob("0 0 * * *", false), gocron.NewTask(locker.Task("daily-settlement", settleDay)),
		gocron.WithName("daily-settlement")); err != nil {
		log.Fatal(err)
	}
	s.Start()
	defer s.Shutdown()
}

// Jobs on other schedules get their own; the rest use the default.
func ExampleBackend_withJobSchedule() {
	var db *gorm.DB // with the ledger table migrated
	daily, _ := ormlock.Cron("@daily", time.UTC)
	quarterHour, _ := ormlock.Every(15*time.Minute, time.UTC)
	locker, err := scheduler.NewLocker(gormsched.Backend(db), daily,
		scheduler.WithJobSchedule("refresh-rates", quarterHour),
		scheduler.WithErrorHandler(func(err error) { slog.Error("scheduled run", "err", err) }))
	if err != nil {
		log.Fatal(err)
	}
	s, _ := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	_, _ = s.NewJob(gocron.DurationJob(15*time.Minute), gocron.NewTask(func() { /* refresh */ }),
		gocron.WithName("refresh-rates"),
		// runs on multiples of 15 minutes, the schedule's times
		gocron.WithStartAt(gocron.WithStartDateTime(time.Now().Truncate(15*time.Minute).Add(15*time.Minute))))
	s.Start()
}

// One replica leads and runs every job; the others stand by and take over
// within the retry interval when it stops.
func ExampleBackend_elector() {
	var db *gorm.DB
	elector, err := scheduler.NewElector(gormsched.Backend(db), "billing-scheduler-leader")
	if err != nil {
		log.Fatal(err)
	}
	defer elector.Close() // gives up the lead at shutdown
	s, err := gocron.NewScheduler(gocron.WithDistributedElector(elector))
	if err != nil {
		log.Fatal(err)
	}
	s.Start()
	defer s.Shutdown()
}

// robfig/cron: wrap each job, with the schedule its spec describes. A
// JobFunc gets the lock's context, and its error is kept in the ledger.
func ExampleBackend_jobWrapper() {
	var db *gorm.DB // with the ledger table migrated
	logger := cron.VerbosePrintfLogger(log.Default())
	nightly, _ := ormlock.Cron("30 2 * * *", time.UTC)
	w, err := scheduler.JobWrapper(gormsched.Backend(db), "nightly-export", nightly, scheduler.WithCronLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	c := cron.New(cron.WithLocation(time.UTC), cron.WithLogger(logger))
	_, err = c.AddJob("30 2 * * *", cron.NewChain(cron.Recover(logger), w).Then(
		scheduler.JobFunc(func(ctx context.Context) error {
			return db.WithContext(ctx).Exec("CALL export_day()").Error
		})))
	if err != nil {
		log.Fatal(err)
	}
	c.Start()
	defer c.Stop()
}

// robfig/cron's seconds dialect (cron.WithSeconds) is ormlock.Cron with the
// same six-field expression; "@every 10s" would be ormlock.Cron("@every 10s",
// nil), windows anchored to the Unix epoch.
func ExampleBackend_cronSeconds() {
	var db *gorm.DB
	const spec = "*/10 * * * * *"
	every10s, err := ormlock.Cron(spec, time.UTC)
	if err != nil {
		log.Fatal(err)
	}
	w, err := scheduler.JobWrapper(gormsched.Backend(db), "heartbeat", every10s)
	if err != nil {
		log.Fatal(err)
	}
	c := cron.New(cron.WithSeconds(), cron.WithLocation(time.UTC))
	_, _ = c.AddJob(spec, cron.NewChain(w).Then(cron.FuncJob(func() { /* beat */ })))
	c.Start()
}

// A job that may outlast its period: WithExclusive keeps its runs from
// overlapping across replicas (a firing during a run waits up to a minute,
// then skips), and WithPrune keeps the ledger to 30 days.
func ExampleBackend_exclusive() {
	var db *gorm.DB
	const spec = "*/5 * * * *"
	every5m, err := ormlock.Cron(spec, time.UTC)
	if err != nil {
		log.Fatal(err)
	}
	locker, err := scheduler.NewLocker(gormsched.Backend(db), every5m,
		scheduler.WithExclusive(time.Minute), scheduler.WithPrune(30*24*time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	s, err := gocron.NewScheduler(gocron.WithLocation(time.UTC), gocron.WithDistributedLocker(locker))
	if err != nil {
		log.Fatal(err)
	}
	_, err = s.NewJob(gocron.CronJob(spec, false), gocron.NewTask(settle), gocron.WithName("reindex"))
	if err != nil {
		log.Fatal(err)
	}
	s.Start()
}
