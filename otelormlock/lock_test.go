package otelormlock_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/sqllock"
)

// TestLockInCallersTx: sqllock.Lock's lock outlives the call (the
// caller's COMMIT ends it, unseen), so its span ends as the call returns,
// the held gauge goes back to 0 and no hold of 0 s is recorded.
func TestLockInCallersTx(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			db := testdb.Open(t, k)
			tel := newTelemetry()
			ctx := context.Background()
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := sqllock.Lock(ctx, tx, "otel-lock-"+string(k), tel.opt); err != nil {
				_ = tx.Rollback()
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			s := tel.span(t, "ormlock.Lock")
			if v, _ := attr(s, "ormlock.outcome"); v.AsString() != "acquired" {
				t.Errorf("outcome %q, want acquired", v.AsString())
			}
			ms := tel.metrics(t)
			if n := sumBy(t, ms, "ormlock.lock.held", "", ""); n != 0 {
				t.Errorf("held gauge %d after Lock returned, want 0", n)
			}
			if h, ok := ms["ormlock.lock.hold.duration"].Data.(metricdata.Histogram[float64]); ok {
				for _, p := range h.DataPoints {
					if p.Count != 0 {
						t.Errorf("a hold of %v s recorded for a lock that outlives its call", p.Sum)
					}
				}
			}
		})
	}
}
