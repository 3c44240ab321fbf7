package demo

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
)

// Contend runs one round of the metrics examples: every replica (one pool
// each) runs job at once in a gormlock.Transaction that works for work;
// one takes the lock, the others see it held, which is no error.
func Contend(ctx context.Context, dbs []*gorm.DB, job string, work time.Duration) error {
	var wg sync.WaitGroup
	errs := make([]error, len(dbs))
	for i, db := range dbs {
		wg.Go(func() {
			err := gormlock.Transaction(db.WithContext(ctx), job, func(tx *gorm.DB) error {
				time.Sleep(work) // the job's work, inside its transaction
				// tx.Statement.Context is the verb's: a tracer's span
				// (otelormlock) nests the query's under the lock's
				return tx.Exec("SELECT 1").Error
			})
			if errors.Is(err, ormlock.ErrNotAcquired) {
				err = nil // another replica runs it
			}
			errs[i] = err
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Serve serves h on addr and runs round every interval until ctx ends
// (nil) or the server fails.
func Serve(ctx context.Context, addr string, h http.Handler, every time.Duration, round func() error) error {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	srvErr := make(chan error, 1)
	go func() { srvErr <- srv.ListenAndServe() }()
	defer srv.Close()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := round(); err != nil {
			slog.Error("job round", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-srvErr:
			return err
		case <-t.C:
		}
	}
}

// PrintMetrics writes g's series in Prometheus' text format.
func PrintMetrics(w io.Writer, g prometheus.Gatherer) error {
	families, err := g.Gather()
	if err != nil {
		return err
	}
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			return err
		}
	}
	return nil
}

// Contention is the command line of the metrics examples: replicas of one
// job contending for its lock.
type Contention struct {
	DSN      string
	Replicas int
	Every    time.Duration
	Rounds   int
	Addr     string
	Job      string
	Work     time.Duration
}

// ParseContention parses the metrics examples' flags.
func ParseContention(name string, args []string, stderr io.Writer) (*Contention, error) {
	c := &Contention{}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.DSN, "dsn", os.Getenv("ORMLOCK_DSN"), "database: a postgres:// URL, or a MySQL/MariaDB DSN (user:pass@tcp(host:port)/db); default $ORMLOCK_DSN")
	fs.IntVar(&c.Replicas, "replicas", 3, "replicas competing for the job")
	fs.DurationVar(&c.Every, "every", 2*time.Second, "interval between job runs")
	fs.IntVar(&c.Rounds, "rounds", 0, "run this many rounds, print the metrics and exit; 0 runs until interrupted and serves -addr")
	fs.StringVar(&c.Addr, "addr", ":2112", "address serving /metrics (when -rounds is 0)")
	fs.StringVar(&c.Job, "job", "daily-settlement", "the job's lock name")
	fs.DurationVar(&c.Work, "work", 200*time.Millisecond, "how long the job works while holding the lock")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if c.DSN == "" {
		return nil, errors.New("no database: pass -dsn or set ORMLOCK_DSN")
	}
	if c.Replicas < 1 {
		return nil, fmt.Errorf("-replicas %d: need at least 1", c.Replicas)
	}
	return c, nil
}

// Run opens c's replicas, a pool each with opts as gormlock's defaults, and runs
// c.Rounds rounds then prints reg's metrics to stdout, or with no rounds
// serves reg on c.Addr and runs a round every c.Every until ctx ends.
func (c *Contention) Run(ctx context.Context, opts []ormlock.Option, reg *prometheus.Registry, stdout io.Writer, after func(io.Writer)) error {
	dbs := make([]*gorm.DB, c.Replicas)
	for i := range dbs {
		db, err := OpenGORM(c.DSN)
		if err != nil {
			return err
		}
		defer CloseGORM(db)
		if err := db.Use(gormlock.New(opts...)); err != nil {
			return err
		}
		dbs[i] = db
	}
	round := func() error { return Contend(ctx, dbs, c.Job, c.Work) }
	if c.Rounds > 0 {
		for range c.Rounds {
			if err := round(); err != nil {
				return err
			}
		}
		if after != nil {
			after(stdout)
		}
		return PrintMetrics(stdout, reg)
	}
	return Serve(ctx, c.Addr, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), c.Every, round)
}
