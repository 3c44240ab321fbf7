package otelormlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// A Session under a lease: its span names the mechanism, the lease's TTL
// and its epoch, which is also the span's fencing token and fn's.
func TestLeaseSpan(t *testing.T) {
	forEach(t, func(t *testing.T, k testdb.Kind, v verbs) {
		tel := newTelemetry()
		ctx := context.Background()
		tbl := testdb.Table(t, k, "otellease")
		leases := tbl + "_l"
		t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + leases) })
		opts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithLeaseTable(leases)}
		if err := v.migrate(ctx, opts...); err != nil {
			t.Fatal(err)
		}
		var token int64
		err := v.session(ctx, ormlock.Name("otel-lease-"+t.Name()), func(ctx context.Context) error {
			token, _ = ormlock.FencingToken(ctx)
			return nil
		}, append(opts, tel.opt, ormlock.WithLease(2*time.Second))...)
		if err != nil {
			t.Fatal(err)
		}
		s := tel.span(t, "ormlock.Session")
		if v, _ := attr(s, "ormlock.mechanism"); v.AsString() != "lease" {
			t.Errorf("ormlock.mechanism %q, want lease", v.AsString())
		}
		if v, _ := attr(s, "ormlock.lease.ttl"); v.AsFloat64() != 2 {
			t.Errorf("ormlock.lease.ttl %v, want 2", v.AsFloat64())
		}
		if v, _ := attr(s, "ormlock.lease.epoch"); token <= 0 || v.AsInt64() != token {
			t.Errorf("ormlock.lease.epoch %d, fn's token %d", v.AsInt64(), token)
		}
		if v, _ := attr(s, "ormlock.fencing_token"); v.AsInt64() != token {
			t.Errorf("ormlock.fencing_token %d, fn's token %d", v.AsInt64(), token)
		}
	})
}
