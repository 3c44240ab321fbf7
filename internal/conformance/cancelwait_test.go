package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/leakcheck"
)

// A verb cancelled while it waits for a lock that another holder has
// (WithWait) leaves nothing behind once it has returned: when the other
// holder releases, the key is free at once for a fresh caller, and the
// cancelled waiter never takes it, behind PgBouncer too. (A wait cut by
// closing its connection lives on in the server until the server notices,
// and can take the lock then, for nobody.)
func TestConformanceCancelledWait(t *testing.T) {
	leakcheck.Goroutines(t)
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		tbl := ledgerTable(t, k, r)
		lt := ormlock.WithLedgerTable(tbl)
		slot := time.Date(2031, 2, 3, 4, 0, 0, 0, time.UTC)
		wait := ormlock.WithWait(30 * time.Second)
		for _, v := range []struct {
			name string
			key  string // the lock's name, held by the other holder
			call func(ctx context.Context, ran *atomic.Bool) error
		}{
			{"Transaction", "cw-tx-" + t.Name(), func(ctx context.Context, ran *atomic.Bool) error {
				return r.Transaction(ctx, "cw-tx-"+t.Name(), func(txn) error { ran.Store(true); return nil }, wait)
			}},
			{"Session", "cw-session-" + t.Name(), func(ctx context.Context, ran *atomic.Bool) error {
				return r.Session(ctx, "cw-session-"+t.Name(), func(context.Context) error { ran.Store(true); return nil }, wait)
			}},
			{"Lead", "cw-lead-" + t.Name(), func(ctx context.Context, ran *atomic.Bool) error {
				return r.(leader).Lead(ctx, "cw-lead-"+t.Name(), func(context.Context) error { ran.Store(true); return nil })
			}},
			{"RunOnce", ormlock.RunKey("cw-runonce-"+t.Name(), slot).String(), func(ctx context.Context, ran *atomic.Bool) error {
				return r.RunOnce(ctx, "cw-runonce-"+t.Name(), slot, func(txn) error { ran.Store(true); return nil }, lt, wait)
			}},
			{"RunOnce claim", ormlock.RunKey("cw-claim-"+t.Name(), slot).String(), func(ctx context.Context, ran *atomic.Bool) error {
				return r.RunOnce(ctx, "cw-claim-"+t.Name(), slot, func(txn) error { ran.Store(true); return nil }, lt, wait, ormlock.WithClaim())
			}},
			{"Migrate", "ormlock.migrate:" + tbl, func(ctx context.Context, _ *atomic.Bool) error {
				return r.Migrate(ctx, lt)
			}},
		} {
			t.Run(v.name, func(t *testing.T) {
				for round := range 3 {
					release := testdb.RawHold(t, k, "", v.key)
					ctx, cancel := context.WithCancel(context.Background())
					time.AfterFunc(time.Duration(150+50*round)*time.Millisecond, cancel)
					var ran atomic.Bool
					err := v.call(ctx, &ran)
					cancel()
					if ran.Load() {
						t.Fatalf("round %d: fn ran while another holder held the lock", round)
					}
					if !errors.Is(err, context.Canceled) {
						t.Fatalf("round %d: cancelled while waiting: %v, want context.Canceled", round, err)
					}
					release()
					if !free(t, k, v.key) {
						t.Fatalf("round %d: %s", round, fmt.Sprintf("the lock was taken after the other holder released it: the cancelled %s still waited in the server", v.name))
					}
				}
			})
		}
	})
}
