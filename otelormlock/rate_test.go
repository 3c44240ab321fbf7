package otelormlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/otelormlock"
)

// TestRateRefusalsByKey: a Rate's refusals are counted by key
// (ormlock.lock.attempts, outcome not_acquired, ormlock.key
// "rate(k,n/per)" with WithKeyAttribute), its takes as acquired.
func TestRateRefusalsByKey(t *testing.T) {
	forEach(t, func(t *testing.T, k testdb.Kind, v verbs) {
		tel := newTelemetry(otelormlock.WithKeyAttribute())
		ctx := context.Background()
		if err := v.migrate(ctx); err != nil {
			t.Fatal(err)
		}
		key := ormlock.Rate("otel-rate-"+t.Name(), 1, time.Hour)
		if err := v.tx(ctx, key, func(context.Context) error { return nil }, tel.opt); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := v.tx(ctx, key, func(context.Context) error { return nil }, tel.opt); !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Fatalf("second take of Rate(1 per 1h): %v, want ErrNotAcquired", err)
			}
		}
		ms := tel.metrics(t)
		if n := sumBy(t, ms, "ormlock.lock.attempts", "ormlock.key", key.String()); n != 4 {
			t.Errorf("attempts of %s: %d, want 4", key, n)
		}
		if n := sumBy(t, ms, "ormlock.lock.attempts", "ormlock.outcome", "not_acquired"); n != 3 {
			t.Errorf("refusals: %d, want 3", n)
		}
		if n := sumBy(t, ms, "ormlock.lock.attempts", "ormlock.outcome", "acquired"); n != 1 {
			t.Errorf("takes: %d, want 1", n)
		}
	})
}
