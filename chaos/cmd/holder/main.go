// Command holder takes an ormlock lock and holds it until it is killed: the
// process the chaos tests kill -9 to show that the database frees the lock of
// a holder that died.
//
// It opens a GORM pool on -dsn (-dialect postgres or mysql), calls
// gormlock.Transaction, gormlock.Session or gormlock.RunOnce (-verb) with the
// lock -key (or the job -job and slot -slot for RunOnce, in claim mode with
// -claim), writes one row into
// the work table -table inside fn when one is given, prints "holding" on
// standard output and sleeps inside fn for -hold (default 5m) or until it is
// killed. Exit status: 0 after a full hold, 2 when the lock is held
// elsewhere, 1 on any other error.
//
//	holder -dialect postgres -dsn postgres://... -verb transaction -key job-1
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/config"
)

func main() {
	os.Exit(run())
}

func run() int {
	var (
		dialect = flag.String("dialect", "postgres", "postgres or mysql")
		dsn     = flag.String("dsn", "", "data source name (pgx URL or go-sql-driver/mysql DSN)")
		verb    = flag.String("verb", "transaction", "transaction, session or runonce")
		key     = flag.String("key", "", "lock name (transaction, session)")
		table   = flag.String("table", "", "work table to write one row (slot, who) into inside fn; none when empty")
		ledger  = flag.String("ledger", config.DefaultLedgerTable, "RunOnce ledger table")
		job     = flag.String("job", "", "RunOnce job name")
		slot    = flag.String("slot", "", "RunOnce slot, RFC 3339")
		hold    = flag.Duration("hold", 5*time.Minute, "how long to hold the lock before exiting normally")
		claim   = flag.Bool("claim", false, "RunOnce in claim mode (ormlock.WithClaim): the ledger row is committed 'running' before fn")
	)
	flag.Parse()
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "holder: "+format+"\n", args...)
		return 1
	}
	if *dsn == "" {
		return fail("-dsn is required")
	}
	if *table != "" {
		if err := config.ValidIdentifier("-table", *table); err != nil {
			return fail("%v", err)
		}
	}
	var dial gorm.Dialector
	switch *dialect {
	case "postgres":
		dial = postgres.Open(*dsn)
	case "mysql":
		dial = mysql.Open(*dsn)
	default:
		return fail("-dialect must be postgres or mysql, got %q", *dialect)
	}
	db, err := gorm.Open(dial, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return fail("open: %v", err)
	}

	// SIGTERM and SIGINT end the hold cleanly (the lock is released);
	// SIGKILL, which the tests send, cannot be caught.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	db = db.WithContext(ctx)

	mark := "holder/" + *verb
	write := func(tx *gorm.DB) error {
		if *table == "" {
			return nil
		}
		return tx.Exec("INSERT INTO "+*table+" (slot, who) VALUES (?, ?)", *slot, mark).Error
	}
	wait := func(ctx context.Context) {
		fmt.Println("holding")
		select {
		case <-ctx.Done():
		case <-time.After(*hold):
		}
	}

	switch *verb {
	case "transaction":
		err = gormlock.Transaction(db, *key, func(tx *gorm.DB) error {
			if err := write(tx); err != nil {
				return err
			}
			wait(ctx)
			return nil
		})
	case "session":
		err = gormlock.Session(db, *key, func(ctx context.Context) error {
			if err := write(db.WithContext(ctx)); err != nil {
				return err
			}
			wait(ctx)
			return nil
		})
	case "runonce":
		var at time.Time
		if at, err = time.Parse(time.RFC3339Nano, *slot); err != nil {
			return fail("-slot: %v", err)
		}
		err = gormlock.RunOnce(db, *job, at, func(tx *gorm.DB) error {
			if err := write(tx); err != nil {
				return err
			}
			wait(ctx)
			return nil
		}, ormlock.WithLedgerTable(*ledger), claimOpt(*claim))
	default:
		return fail("-verb must be transaction, session or runonce, got %q", *verb)
	}
	switch {
	case errors.Is(err, ormlock.ErrNotAcquired):
		fmt.Fprintf(os.Stderr, "holder: %v\n", err)
		return 2
	case err != nil:
		return fail("%v", err)
	}
	return 0
}

// claimOpt is ormlock.WithClaim when claim is set, else no option.
func claimOpt(claim bool) ormlock.Option {
	if claim {
		return ormlock.WithClaim()
	}
	return nil
}
