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
	"fmt"
	"io"

	"github.com/prometheus/client_golang/prometheus"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/examples/internal/demo"
	"github.com/ormlock/ormlock/otelormlock"
)

func main() { demo.Main("otel", run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := demo.ParseContention("otel", args, stderr)
	if err != nil {
		return err
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

	return c.Run(ctx, []ormlock.Option{otel}, reg, stdout, func(w io.Writer) {
		for _, s := range spans.Ended() {
			fmt.Fprintf(w, "# span %s %v\n", s.Name(), s.Attributes())
		}
	})
}
