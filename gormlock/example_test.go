package gormlock_test

import (
	"context"
	"errors"
	"log"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
)

// The cron job of three replicas: whichever takes the lock settles the day,
// the others skip.
func ExampleTransaction() {
	db, err := gorm.Open(postgres.Open("postgres://app@localhost/app"), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	err = gormlock.Transaction(db, "daily-settlement", func(tx *gorm.DB) error {
		return tx.Exec("INSERT INTO settlements (day) VALUES (CURRENT_DATE)").Error
	})
	switch {
	case errors.Is(err, ormlock.ErrNotAcquired):
		log.Print("another replica is settling")
	case err != nil:
		log.Fatal(err)
	}
}

// Waiting up to a bound, with GORM's context.
func ExampleTransaction_wait() {
	var db *gorm.DB // opened elsewhere
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := gormlock.Transaction(db.WithContext(ctx), "reindex-catalog", func(tx *gorm.DB) error {
		return tx.Exec("UPDATE catalog SET indexed = true").Error
	}, ormlock.WithWait(10*time.Second))
	if errors.Is(err, ormlock.ErrNotAcquired) {
		log.Print("still held after 10s")
	}
}

// Numeric keys keep excluding code that already calls
// pg_advisory_xact_lock(4242).
func ExampleTransaction_numericKey() {
	var db *gorm.DB // opened elsewhere
	_ = gormlock.Transaction(db, int64(4242), func(tx *gorm.DB) error { return nil })
	_ = gormlock.Transaction(db, ormlock.Pair(1, 7), func(tx *gorm.DB) error { return nil })
}

// A long job holds the lock on a dedicated connection while its own
// statements use the pool; ctx is cancelled if the lock is lost.
func ExampleSession() {
	var db *gorm.DB // opened elsewhere
	err := gormlock.Session(db, "monthly-report", func(ctx context.Context) error {
		for page := 0; page < 100; page++ {
			if err := db.WithContext(ctx).Exec("SELECT render_page(?)", page).Error; err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, ormlock.ErrLockLost) {
		log.Print("lost the lock part-way; the job will run again")
	}
}

// Registering the plugin sets defaults for every call on db, and fails at
// start-up on an unsupported dialect.
func ExampleNew() {
	var db *gorm.DB // opened elsewhere
	if err := db.Use(gormlock.New(ormlock.WithNamespace("billing"), ormlock.WithWait(5*time.Second))); err != nil {
		log.Fatal(err)
	}
}

// A tenant's emails, at most 100 a minute across every replica: the token
// is taken in the transaction, so an email that fails (rolled back) does
// not use up the quota.
func ExampleUsage() {
	var db *gorm.DB // opened elsewhere; gormlock.Migrate(db) run once
	limit := ormlock.Rate("emails:tenant-42", 100, time.Minute)
	err := gormlock.Transaction(db, limit, func(tx *gorm.DB) error {
		return tx.Exec("INSERT INTO outbox (tenant, body) VALUES (?, ?)", 42, "hello").Error
	}, ormlock.WithWait(2*time.Second))
	if errors.Is(err, ormlock.ErrNotAcquired) {
		after, _ := ormlock.RetryAfter(err)
		log.Print("limit reached; the next token is due in ", after)
	}
	if u, err := gormlock.Usage(db, limit); err == nil {
		log.Print(u.Used, " used, ", u.Free, " free")
	}
}
