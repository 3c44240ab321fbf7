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
	"io"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/examples/internal/demo"
)

func main() { demo.Main("prometheus", run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := demo.ParseContention("prometheus", args, stderr)
	if err != nil {
		return err
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

	return c.Run(ctx, []ormlock.Option{ormlock.WithObserver(observer)}, reg, stdout, nil)
}
