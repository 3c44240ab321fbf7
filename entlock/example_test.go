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
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent"
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

// The midnight settlement of three replicas: each one's scheduler fires at
// local midnight in Berlin, each maps its trigger time to the same slot, and
// exactly one of them settles the day. The ledger row commits together with
// fn's writes, so a failed run leaves nothing behind and a later trigger
// for the same slot retries it (a catch-up, WithCatchUp: the next midnight's
// firing is the next slot's).
func ExampleRunOnce() {
	var client *ent.Client // built on entlock.Wrap
	ctx := context.Background()
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
	err = entlock.RunOnce(ctx, client, "daily-settlement", slot, func(tx *ent.Tx) error {
		return tx.Item.Create().SetOwner("settlement").SetN(slot.YearDay()).Exec(ctx)
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

// A long job in claim mode: a "running" row is committed first and the lock
// is held on a dedicated connection. fn's tx is a transaction of its own,
// begun at its first statement and committed before the row is marked done;
// the bulk of the work goes through the client and commits as it goes. Runs
// shows the audit trail.
func ExampleRunOnce_claim() {
	var client *ent.Client // built on entlock.Wrap
	ctx := context.Background()
	hourly, err := ormlock.Cron("0 * * * *", time.UTC)
	if err != nil {
		log.Fatal(err)
	}
	slot := hourly.Slot(time.Now())
	err = entlock.RunOnce(ctx, client, "export-orders", slot, func(tx *ent.Tx) error {
		for page := 0; page < 100; page++ {
			if err := client.Item.Create().SetOwner("export").SetN(page).Exec(ctx); err != nil {
				return err
			}
		}
		// the summary commits with the end of the run, or not at all if the
		// lock was lost meanwhile
		return tx.Item.Create().SetOwner("export-summary").SetN(100).Exec(ctx)
	}, ormlock.WithClaim(), ormlock.WithOwner("exporter-1"))
	if err != nil && !errors.Is(err, ormlock.ErrAlreadyDone) && !errors.Is(err, ormlock.ErrNotAcquired) {
		log.Print(err)
	}

	last, err := entlock.Runs(ctx, client, "export-orders", 24)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range last {
		log.Printf("%s %s by %s in %v %s", r.Slot.Format(time.RFC3339), r.Status, r.Owner, r.Duration, r.Error)
	}
}

// Create the ledger table at start-up; every replica may do it. A custom
// table name can be set once, as a default of the wrapped driver.
func ExampleMigrate() {
	var db *sql.DB // opened elsewhere
	drv := entlock.Wrap(entsql.OpenDB(dialect.Postgres, db), ormlock.WithLedgerTable("billing_runs"))
	client := ent.NewClient(ent.Driver(drv))
	if err := entlock.Migrate(context.Background(), client); err != nil {
		log.Fatal(err)
	}
}

// The audit trail of a job: the last week of daily runs, newest first.
func ExampleRuns() {
	var client *ent.Client // built on entlock.Wrap
	runs, err := entlock.Runs(context.Background(), client, "daily-settlement", 7)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range runs {
		log.Printf("%s: %s by %s, took %v", r.Slot.Format("2006-01-02"), r.Status, r.Owner, r.Duration)
	}
}

// Why didn't the nightly job run? Ask who holds its lock.
func ExampleHolder() {
	var client *ent.Client // built on entlock.Wrap
	ctx := context.Background()
	err := entlock.Transaction(ctx, client, "daily-settlement", func(tx *ent.Tx) error { return nil })
	if errors.Is(err, ormlock.ErrNotAcquired) {
		h, herr := entlock.Holder(ctx, client, "daily-settlement")
		if herr == nil && h.Held {
			// e.g. held pid=5311 user=app client=10.0.0.7:56870 state="idle in transaction" held_for=2h0m3s ...
			log.Printf("daily-settlement is held: %s", h)
		}
	}
}
