package conformance_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/sqllock"
)

// TestLeaseReleaseAfterCancel: 4,000 Sessions of one process hold leases
// on a pool of 4 connections, and their callers' common context is
// cancelled: each Session returns only once its release was sent, though
// the releases queue for the pool's connections far longer than the
// release grace (a second after the caller's context ended), so no lease
// is live once every Session returned.
func TestLeaseReleaseAfterCancel(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := testdb.Open(t, k)
		db.SetMaxOpenConns(4)
		db.SetMaxIdleConns(4)
		ledger := testdb.Table(t, k, "lrel")
		table := ledger + "_l"
		t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + table) })
		tables := []ormlock.Option{ormlock.WithLedgerTable(ledger), ormlock.WithLeaseTable(table)}
		if err := sqllock.Migrate(context.Background(), db, tables...); err != nil {
			t.Fatal(err)
		}
		opts := append(tables, ormlock.WithLease(30*time.Second))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		held := make(chan error, 2*leaseReleaseN)
		var wg sync.WaitGroup
		for i := range leaseReleaseN {
			wg.Go(func() {
				err := sqllock.Session(ctx, db, fmt.Sprintf("rel-%s-%d", k, i), func(ctx context.Context) error {
					held <- nil
					<-ctx.Done()
					return nil
				}, opts...)
				if err != nil && ctx.Err() == nil {
					held <- err
				}
			})
		}
		for range leaseReleaseN {
			if err := <-held; err != nil {
				cancel()
				wg.Wait()
				t.Fatalf("holding %d leases: %v", leaseReleaseN, err)
			}
		}
		cancel()
		wg.Wait()
		if n := liveLeases(t, k, table); n != 0 {
			t.Errorf("%d of %d leases live after every Session returned on a cancelled context", n, leaseReleaseN)
		}
		testdb.AssertNoLeaks(t, k, db)
	})
}

// leaseReleaseN is how many leases TestLeaseReleaseAfterCancel releases
// at once: enough for their releases to queue well past the grace, few
// enough that under the race detector on a loaded 2-core machine the last
// one still gets a connection within the release's own timeout (15 s).
const leaseReleaseN = 4000
