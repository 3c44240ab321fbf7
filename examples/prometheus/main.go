// Command prometheus shows ormlock's observer feeding Prometheus metrics.
// Several "replicas" (each with its own connection pool, as separate
// processes would have) run the same cron job at every tick; exactly one
// takes the lock and works, the others see it held. Every lock event is
// counted by [Metrics] and logged by ormlock.SlogObserver.
//
// Serve /metrics until interrupted:
//
//	go run ./prometheus -dsn 'postgres://app@localhost:5432/app' -addr :2112
//	curl -s localhost:2112/metrics | grep ^ormlock_
//
// Or run a few rounds and print the metrics (MySQL/MariaDB DSNs work too):
//
//	go run ./prometheus -dsn 'app:secret@tcp(127.0.0.1:3306)/app' -rounds 3
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/examples/internal/demo"
	"github.com/ormlock/ormlock/gormlock"
)

func main() { demo.Main("prometheus", run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("prometheus", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := fs.String("dsn", os.Getenv("ORMLOCK_DSN"), "database: a postgres:// URL, or a MySQL/MariaDB DSN (user:pass@tcp(host:port)/db); default $ORMLOCK_DSN")
	replicas := fs.Int("replicas", 3, "replicas competing for the job")
	every := fs.Duration("every", 2*time.Second, "interval between job runs")
	rounds := fs.Int("rounds", 0, "run this many rounds, print the metrics and exit; 0 runs until interrupted and serves -addr")
	addr := fs.String("addr", ":2112", "address serving /metrics (when -rounds is 0)")
	job := fs.String("job", "daily-settlement", "the job's lock name")
	work := fs.Duration("work", 200*time.Millisecond, "how long the job works while holding the lock")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dsn == "" {
		return errors.New("no database: pass -dsn or set ORMLOCK_DSN")
	}
	if *replicas < 1 {
		return fmt.Errorf("-replicas %d: need at least 1", *replicas)
	}

	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg)
	if err != nil {
		return err
	}
	logs := ormlock.SlogObserver(slog.New(slog.NewTextHandler(stderr, nil)))
	observer := ormlock.ObserverFunc(func(ctx context.Context, e ormlock.Event) {
		metrics.Observe(ctx, e)
		logs.Observe(ctx, e)
	})

	dbs := make([]*gorm.DB, *replicas)
	for i := range dbs {
		db, err := demo.OpenGORM(*dsn)
		if err != nil {
			return err
		}
		defer demo.CloseGORM(db)
		if err := db.Use(gormlock.New(ormlock.WithObserver(observer))); err != nil {
			return err
		}
		dbs[i] = db
	}

	round := func() error { return demo.Contend(ctx, dbs, *job, *work) }

	if *rounds > 0 {
		for range *rounds {
			if err := round(); err != nil {
				return err
			}
		}
		return demo.PrintMetrics(stdout, reg)
	}

	return demo.Serve(ctx, *addr, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), *every, round)
}
