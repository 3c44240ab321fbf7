package otelormlock_test

import (
	"context"
	"database/sql"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/otelormlock"
	"github.com/ormlock/ormlock/sqllock"
)

// BenchmarkOtel is the cost per call of otelormlock: sqllock.Transaction
// and sqllock.Session on the local PostgreSQL, without the module ("off")
// and with it ("on": a sampled span per call, recorded by the SDK and
// dropped, and the metrics into a manual reader).
//
//	cd otelormlock && CI=true go test -run '^$' -bench BenchmarkOtel -benchmem -count 5 .
func BenchmarkOtel(b *testing.B) {
	db := testdb.Open(b, testdb.Postgres)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	on := otelormlock.New(otelormlock.WithTracerProvider(tp), otelormlock.WithMeterProvider(mp))
	ctx := context.Background()
	for _, mode := range []struct {
		name string
		opts []ormlock.Option
	}{{"off", nil}, {"on", []ormlock.Option{on}}} {
		b.Run("Transaction/"+mode.name, func(b *testing.B) {
			for b.Loop() {
				if err := sqllock.Transaction(ctx, db, "bench-otel", func(context.Context, *sql.Tx) error { return nil }, mode.opts...); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("Session/"+mode.name, func(b *testing.B) {
			for b.Loop() {
				if err := sqllock.Session(ctx, db, "bench-otel", func(context.Context) error { return nil }, mode.opts...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
