package conformance_test

import (
	"context"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/sqllock"
)

// TestLeasePrune: Prune deletes the lease rows expired for longer than
// olderThan (an exclusive lease's row, a shared lease's key row), and a
// new grant of the key after the prune gets an epoch above the pruned
// one (the epoch lives on in the key's fencing counter); a live lease's
// row is kept.
func TestLeasePrune(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := testdb.Open(t, k)
		ledger := testdb.Table(t, k, "lprune")
		table := ledger + "_l"
		t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + table) })
		tables := []ormlock.Option{ormlock.WithLedgerTable(ledger), ormlock.WithLeaseTable(table)}
		ctx := context.Background()
		if err := sqllock.Migrate(ctx, db, tables...); err != nil {
			t.Fatal(err)
		}
		opts := append(tables, ormlock.WithLease(time.Second))
		epoch := func(key string, shared bool) int64 {
			t.Helper()
			var tok int64
			target := ormlock.Name(key)
			if shared {
				target = ormlock.Shared(key)
			}
			err := sqllock.Session(ctx, db, target, func(ctx context.Context) error {
				tok, _ = ormlock.FencingToken(ctx)
				return nil
			}, opts...)
			if err != nil {
				t.Fatalf("Session %v: %v", target, err)
			}
			return tok
		}
		rows := func() int {
			t.Helper()
			var n int
			if err := testdb.AdminDB(t, k).QueryRow("SELECT COUNT(*) FROM " + table + " WHERE lock_key <> ''").Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		key := "prune-" + string(k)
		e1 := epoch(key, false)
		e2 := epoch(key, false)
		_ = epoch(key+"-shared", true)
		if e1 <= 0 || e2 <= e1 {
			t.Fatalf("epochs %d then %d", e1, e2)
		}
		before := rows()
		time.Sleep(1500 * time.Millisecond) // released rows expired for longer than a second
		live := make(chan struct{})
		held := make(chan struct{})
		go func() {
			_ = sqllock.Session(ctx, db, key+"-live", func(ctx context.Context) error {
				close(held)
				<-live
				return nil
			}, opts...)
		}()
		<-held
		if _, err := sqllock.Prune(ctx, db, time.Second, tables...); err != nil {
			t.Fatalf("Prune: %v", err)
		}
		after := rows()
		close(live)
		if after != 1 {
			t.Errorf("%d lease rows before, %d after Prune, want only the live lease's one left", before, after)
		}
		e3 := epoch(key, false)
		if e3 <= e2 {
			t.Errorf("the epoch after Prune deleted the row is %d, want above the pruned %d", e3, e2)
		}
		testdb.AssertNoLeaks(t, k, db)
	})
}
