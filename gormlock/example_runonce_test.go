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

// The midnight settlement of three replicas: each one's scheduler fires at
// local midnight in Berlin, each maps its trigger time to the same slot, and
// exactly one of them settles the day. The ledger row commits together with
// the settlement, so a failed run leaves nothing behind and a later trigger
// for the same slot retries it (a catch-up, WithCatchUp: the next midnight's
// firing is the next slot's).
func ExampleRunOnce() {
	var db *gorm.DB // opened elsewhere
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		log.Fatal(err)
	}
	daily, err := ormlock.Every(24*time.Hour, berlin)
	if err != nil {
		log.Fatal(err)
	}

	// in the scheduler's callback:
	slot := daily.Slot(time.Now())
	err = gormlock.RunOnce(db, "daily-settlement", slot, func(tx *gorm.DB) error {
		return tx.Exec("INSERT INTO settlements (day) VALUES (?)", slot).Error
	})
	switch {
	case errors.Is(err, ormlock.ErrAlreadyDone):
		log.Print("another replica settled this day")
	case errors.Is(err, ormlock.ErrNotAcquired):
		log.Print("another replica is settling right now")
	case err != nil:
		log.Printf("settlement failed; a catch-up or a later trigger in this slot retries: %v", err)
	}
}

// A long job that must not run inside one transaction: claim mode commits a
// "running" row first, holds the lock on a dedicated connection while fn
// works through the pool, and records done or failed (with the error) at the
// end; Runs shows the audit trail.
func ExampleRunOnce_claim() {
	var db *gorm.DB // opened elsewhere
	hourly, err := ormlock.Cron("0 * * * *", time.UTC)
	if err != nil {
		log.Fatal(err)
	}
	slot := hourly.Slot(time.Now())
	err = gormlock.RunOnce(db, "export-orders", slot, func(db *gorm.DB) error {
		ctx := db.Statement.Context // cancelled with cause ErrLockLost if the lock is lost
		for page := 0; page < 100; page++ {
			if err := ctx.Err(); err != nil {
				return context.Cause(ctx)
			}
			if err := db.Exec("SELECT export_page(?, ?)", slot, page).Error; err != nil {
				return err
			}
		}
		return nil
	}, ormlock.WithClaim(), ormlock.WithOwner("exporter-1"))
	if err != nil && !errors.Is(err, ormlock.ErrAlreadyDone) && !errors.Is(err, ormlock.ErrNotAcquired) {
		log.Print(err)
	}

	last, err := gormlock.Runs(db, "export-orders", 24)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range last {
		log.Printf("%s %s by %s in %v %s", r.Slot.Format(time.RFC3339), r.Status, r.Owner, r.Duration, r.Error)
	}
}

// Create the ledger table at start-up; every replica may do it, and a custom
// table name can be set once through the plugin.
func ExampleMigrate() {
	var db *gorm.DB // opened elsewhere
	if err := db.Use(gormlock.New(ormlock.WithLedgerTable("billing_runs"))); err != nil {
		log.Fatal(err)
	}
	if err := gormlock.Migrate(db); err != nil {
		log.Fatal(err)
	}
}
