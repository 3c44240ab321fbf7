package otelormlock_test

import (
	"context"
	"database/sql"
	"testing"

	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/otelormlock"
	"github.com/ormlock/ormlock/sqllock"
)

// panickyTracer's spans panic as they start; panickyMeter's provider
// panics as it is asked for a meter.
type (
	panickyTP     struct{ tracenoop.TracerProvider }
	panickyTracer struct{ tracenoop.Tracer }
	panickyMP     struct{ metricnoop.MeterProvider }
)

func (panickyTP) Tracer(string, ...trace.TracerOption) trace.Tracer { return panickyTracer{} }

func (panickyTracer) Start(context.Context, string, ...trace.SpanStartOption) (context.Context, trace.Span) {
	panic("tracer boom")
}

func (panickyMP) Meter(string, ...metric.MeterOption) metric.Meter { panic("meter boom") }

// TestPanickingProviders: a tracer that panics in Start and a meter
// provider that panics cost no lock: the verbs run fn, release, and the
// lock is free after.
func TestPanickingProviders(t *testing.T) {
	db := testdb.Open(t, testdb.Postgres)
	opt := otelormlock.New(otelormlock.WithTracerProvider(panickyTP{}), otelormlock.WithMeterProvider(panickyMP{}))
	ctx := context.Background()
	ran := 0
	if err := sqllock.Transaction(ctx, db, "otel-panic", func(ctx context.Context, _ *sql.Tx) error {
		ran++
		if !ormlock.Held(ctx) {
			t.Error("Held is false in fn")
		}
		return nil
	}, opt); err != nil {
		t.Fatal(err)
	}
	if err := sqllock.Session(ctx, db, "otel-panic", func(context.Context) error { ran++; return nil }, opt); err != nil {
		t.Fatal(err)
	}
	if ran != 2 {
		t.Fatalf("fn ran %d times, want 2", ran)
	}
	if !testdb.RawFree(t, testdb.Postgres, "", "otel-panic") {
		t.Fatal("the lock is held after the verbs returned")
	}
}
