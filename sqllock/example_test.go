package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/sqllock"
)

var db *sql.DB // opened with sql.Open("pgx", dsn) or sql.Open("mysql", dsn)

func ExampleTransaction() {
	ctx := context.Background()
	err := sqllock.Transaction(ctx, db, "daily-settlement", func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO settlements (day) VALUES ($1)", time.Now().Format(time.DateOnly))
		return err
	}, ormlock.WithWait(5*time.Second))
	if errors.Is(err, ormlock.ErrNotAcquired) {
		fmt.Println("another replica settles today")
	}
}

func ExampleSession() {
	ctx := context.Background()
	err := sqllock.Session(ctx, db, "reindex", func(ctx context.Context) error {
		_, err := db.ExecContext(ctx, "REINDEX TABLE settlements") // through the pool, under the lock
		return err
	})
	if errors.Is(err, ormlock.ErrLockLost) {
		fmt.Println("the lock was lost while reindexing")
	}
}

func ExampleRunScheduled() {
	ctx := context.Background()
	if err := sqllock.Migrate(ctx, db); err != nil { // once, at start-up
		panic(err)
	}
	hourly, err := ormlock.Every(time.Hour, time.UTC)
	if err != nil {
		panic(err)
	}
	err = sqllock.RunScheduled(ctx, db, "hourly-report", hourly, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO reports (made) VALUES (now())")
		return err
	})
	if errors.Is(err, ormlock.ErrAlreadyDone) {
		fmt.Println("another replica made this hour's report")
	}
}

func ExampleHolder() {
	h, err := sqllock.Holder(context.Background(), db, "reindex")
	if err == nil && h.Held {
		fmt.Println("held by", h.ClientAddr)
	}
}
