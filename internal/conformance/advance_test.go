package conformance_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// TestAdvanceFences: every adapter's AdvanceFences moves every counter of
// the namespace in effect by by (the next token is the last plus by plus
// one), leaves other namespaces alone, and refuses a by outside 1..2^52
// with ErrInvalidArgument. The failover it is for is tested in package
// failover.
func TestAdvanceFences(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r := openRunner(t, a, k)
		tbl := ormlock.WithLedgerTable(ledgerTable(t, k, r))
		other := ormlock.WithNamespace("advance-other")
		tok := func(key string, opts ...ormlock.Option) int64 {
			t.Helper()
			var got int64
			err := r.Transaction(ctx, key, func(tx txn) error {
				got, _ = tx.FencingToken()
				return nil
			}, append([]ormlock.Option{tbl, ormlock.WithFencing()}, opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		a1, b1, o1 := tok("advance-a"), tok("advance-b"), tok("advance-a", other)
		n, err := r.AdvanceFences(ctx, 1000, tbl)
		if err != nil || n != 2 {
			t.Fatalf("AdvanceFences: %d, %v; want 2 counters", n, err)
		}
		if a2, b2, o2 := tok("advance-a"), tok("advance-b"), tok("advance-a", other); a2 != a1+1001 || b2 != b1+1001 || o2 != o1+1 {
			t.Errorf("tokens after AdvanceFences(1000): %d, %d, other namespace %d; want %d, %d, %d", a2, b2, o2, a1+1001, b1+1001, o1+1)
		}
		for _, by := range []int64{0, -1, 1<<52 + 1} {
			if _, err := r.AdvanceFences(ctx, by, tbl); !errors.Is(err, ormlock.ErrInvalidArgument) {
				t.Errorf("AdvanceFences(%d): %v, want ErrInvalidArgument", by, err)
			}
		}
	})
}
