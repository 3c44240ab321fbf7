package otelormlock_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/sqllock"
)

// RunScheduled's runs, caught-up ones included, are each an ormlock.RunOnce
// span, a child of the caller's span, and each run's fn context carries
// its own span and slot.
func TestRunScheduledSpans(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := testdb.Open(t, k)
		tel := newTelemetry()
		ctx, caller := tel.tp.Tracer("test").Start(context.Background(), "caller")
		tbl := testdb.Table(t, k, "otelsched")
		if err := sqllock.Migrate(ctx, db, ormlock.WithLedgerTable(tbl)); err != nil {
			t.Fatal(err)
		}
		hourly, err := ormlock.Every(time.Hour, time.UTC)
		if err != nil {
			t.Fatal(err)
		}
		var inFn []trace.SpanContext
		err = sqllock.RunScheduled(ctx, db, "sched", hourly, func(ctx context.Context, _ *sql.Tx) error {
			inFn = append(inFn, trace.SpanContextFromContext(ctx))
			return nil
		}, ormlock.WithLedgerTable(tbl), ormlock.WithCatchUp(3*time.Hour, ormlock.CatchUpAll), tel.opt)
		caller.End()
		if err != nil {
			t.Fatal(err)
		}
		var runs []string
		for _, s := range tel.spans.Ended() {
			if s.Name() != "ormlock.RunOnce" {
				continue
			}
			if s.Parent().SpanID() != caller.SpanContext().SpanID() {
				t.Errorf("RunOnce span's parent %v, want the caller's %v", s.Parent().SpanID(), caller.SpanContext().SpanID())
			}
			slot, _ := attr(s, "ormlock.slot")
			runs = append(runs, slot.String())
		}
		if len(runs) < 2 || len(runs) != len(inFn) {
			t.Fatalf("%d RunOnce spans (slots %v) for %d runs of fn, want one per run, caught-up ones included", len(runs), runs, len(inFn))
		}
		for i, sc := range inFn {
			if !sc.IsValid() {
				t.Errorf("run %d: fn's context carries no span", i)
			}
		}
	})
}
