package conformance_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ormlock/ormlock/internal/stmtlog"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
)

// The round trips of a lease on PostgreSQL and PgBouncer, in the server's
// statement log: a Session is its acquire and its release (2); a
// Transaction adds fn's BEGIN, the check before COMMIT and the COMMIT
// (5); ten Sessions of one pool held together are renewed by one
// statement per interval, not one each (ten, so that an interval that a
// loaded machine stretches, or Sessions granted a little apart that
// fall into two batches once, still count far fewer statements).
func TestLeaseRoundTrips(t *testing.T) {
	forEachPostgresInTurn(t, func(t *testing.T, a adapter, k testdb.Kind) {
		sl := stmtlog.Start(t, k)
		db := sl.Open(t)
		enttest.Migrate(t, k)
		t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
		r := a.on(t, k.Dialect(), db)
		opts := leaseOpts(t, k, openRunner(t, a, k), time.Second)
		ctx := context.Background()
		name := "lease-rt-" + t.Name()
		counts := map[string][]string{
			"Session": sl.Count(t, func() error {
				return r.Session(ctx, name, func(context.Context) error { return nil }, opts...)
			}),
			"Transaction": sl.Count(t, func() error {
				return r.Transaction(ctx, name, func(txn) error { return nil }, opts...)
			}),
		}
		for c, lines := range counts {
			t.Logf("%s: %d round trips: %q", c, len(lines), lines)
		}
		if n := len(counts["Session"]); n != 2 {
			t.Errorf("Session as a lease: %d round trips, want 2 (acquire, release)", n)
		}
		if n := len(counts["Transaction"]); n != 5 {
			t.Errorf("Transaction as a lease: %d round trips, want 5 (acquire, BEGIN, check, COMMIT, release)", n)
		}
		const held = 10
		hold := sl.Count(t, func() error {
			var wg sync.WaitGroup
			errs := make([]error, held)
			in := make(chan struct{}, held)
			leave := make(chan struct{})
			for i := range held {
				wg.Go(func() {
					errs[i] = r.Session(ctx, name+"-"+string(rune('a'+i)), func(context.Context) error {
						in <- struct{}{}
						<-leave
						return nil
					}, opts...)
				})
			}
			for range held {
				select {
				case <-in:
				case <-time.After(30 * time.Second):
					close(leave)
					wg.Wait()
					return fmt.Errorf("the Sessions did not all hold: %v", errs)
				}
			}
			time.Sleep(800 * time.Millisecond) // two renewal intervals
			close(leave)
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					return err
				}
			}
			return nil
		})
		renewals := 0
		for _, l := range hold {
			if strings.Contains(l, "renewals = l.renewals + 1") {
				renewals++
			}
		}
		t.Logf("%d Sessions held for two renewal intervals: %d statements, %d of them renewals", held, len(hold), renewals)
		if renewals == 0 || renewals >= held {
			t.Errorf("%d renewal statements for %d leases held over two intervals, want one per interval for all", renewals, held)
		}
	})
}
