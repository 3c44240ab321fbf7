// Command otel shows otelormlock: OpenTelemetry spans and metrics for
// ormlock's locks, the metrics exported to Prometheus through OTel's
// Prometheus exporter (go.opentelemetry.io/otel/exporters/prometheus).
// Several "replicas" (each with its own connection pool, as separate
// processes would have) run the same job at every tick; one takes the lock
// and works, the others see it held. Where examples/prometheus counts
// events with an observer of its own, here one option does it all:
//
//	db.Use(gormlock.New(otelormlock.New(otelormlock.WithMeterProvider(mp), otelormlock.WithTracerProvider(tp))))
//
// Serve /metrics until interrupted:
//
//	go run ./otel -dsn 'postgres://app@localhost:5432/app' -addr :2112
//	curl -s localhost:2112/metrics | grep ^ormlock_
//
// Or run a few rounds and print the metrics and the spans' names (MySQL and
// MariaDB DSNs work too):
//
//	go run ./otel -dsn 'app:secret@tcp(127.0.0.1:3306)/app' -rounds 3
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"gorm.io/gorm"

	"github.com/ormlock/ormlock/examples/internal/demo"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/otelormlock"
)

func main() { demo.Main("otel", run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("otel", flag.ContinueOnError)
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

	// metrics: OTel's Prometheus exporter is a reader of the meter
	// provider, registered in a Prometheus registry
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.Background())
	// spans: recorded in memory here; a real program exports them (OTLP)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())
	otel := otelormlock.New(otelormlock.WithMeterProvider(mp), otelormlock.WithTracerProvider(tp))

	dbs := make([]*gorm.DB, *replicas)
	for i := range dbs {
		db, err := demo.OpenGORM(*dsn)
		if err != nil {
			return err
		}
		defer demo.CloseGORM(db)
		if err := db.Use(gormlock.New(otel)); err != nil {
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
		for _, s := range spans.Ended() {
			fmt.Fprintf(stdout, "# span %s %v\n", s.Name(), s.Attributes())
		}
		return demo.PrintMetrics(stdout, reg)
	}

	return demo.Serve(ctx, *addr, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), *every, round)
}
