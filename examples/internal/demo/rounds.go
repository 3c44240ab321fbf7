package demo

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
