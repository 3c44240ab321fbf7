package entlock_test

import (
	"context"
	"database/sql"
	"errors"
	"log"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/enttest/ent"
)

// Build the client on a wrapped driver once, at start-up. Everything ent
// does through it is unchanged; the verbs of entlock can now take locks.
func ExampleWrap() {
	db, err := sql.Open("pgx", "postgres://app@localhost/app")
	if err != nil {
		log.Fatal(err)
	}
	drv := entlock.Wrap(entsql.OpenDB(dialect.Postgres, db), ormlock.WithNamespace("billing"))
	if err := drv.Err(); err != nil {
		log.Fatal(err) // e.g. ormlock.ErrUnsupportedDialect for sqlite3
	}
	client := ent.NewClient(ent.Driver(drv))
	defer client.Close()
}

// The cron job of three replicas: whichever takes the lock settles the day,
// the others skip. T is inferred: fn gets the generated *ent.Tx.
func ExampleTransaction() {
	var client *ent.Client // built on entlock.Wrap, see Wrap
	ctx := context.Background()
	err := entlock.Transaction(ctx, client, "daily-settlement", func(tx *ent.Tx) error {
		return tx.Item.Create().SetOwner("settlement").SetN(1).Exec(ctx)
	})
	switch {
	case errors.Is(err, ormlock.ErrNotAcquired):
		log.Print("another replica is settling")
	case err != nil:
		log.Fatal(err)
	}
}

// Waiting up to a bound; ctx can end the wait sooner.
func ExampleTransaction_wait() {
	var client *ent.Client // built on entlock.Wrap
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := entlock.Transaction(ctx, client, "reindex-catalog", func(tx *ent.Tx) error {
		_, err := tx.Item.Update().SetN(0).Save(ctx)
		return err
	}, ormlock.WithWait(10*time.Second))
	if errors.Is(err, ormlock.ErrNotAcquired) {
		log.Print("still held after 10s")
	}
}

// A long job holds the lock on a dedicated connection while its own
// statements use the pool; ctx is cancelled if the lock is lost.
func ExampleSession() {
	var client *ent.Client // built on entlock.Wrap
	err := entlock.Session(context.Background(), client, "monthly-report", func(ctx context.Context) error {
		for page := 0; page < 100; page++ {
			if err := client.Item.Create().SetOwner("report").SetN(page).Exec(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, ormlock.ErrLockLost) {
		log.Print("lost the lock part-way; the job will run again")
	}
}

// Session also takes the wrapped driver itself, for code that has it at
// hand rather than a client.
func ExampleSession_driver() {
	var drv *entlock.Driver // from entlock.Wrap
	err := entlock.Session(context.Background(), drv, "vacuum-archive", func(ctx context.Context) error {
		_, err := drv.DB().ExecContext(ctx, "VACUUM archive")
		return err
	})
	if err != nil {
		log.Print(err)
	}
}
