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
)

// Lead with leases: each term is a lease whose epoch is the term's token.
// Three replicas: one leader at a time; the leader frozen (its renewals
// stopped) is deposed with ErrLockLost by its own deadline and another is
// elected with a greater token; a resignation hands over; cancelling ends
// every campaign, leaving no lease unexpired.
func TestLeaseLead(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		var rs [3]runner
		var ls [3]leader
		for i := range rs {
			rs[i] = openRunner(t, a, k)
			ls[i] = leaderOf(t, a, rs[i])
		}
		opts := leaseOpts(t, k, rs[0], time.Second)
		key := "lease-lead-" + t.Name()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var inside atomic.Int64
		elected := make(chan term, 16)
		deposed := make(chan error, 16)
		results := make(chan error, len(rs))
		var resign [3]chan struct{}
		for i := range rs {
			resign[i] = make(chan struct{})
			go func() {
				results <- ls[i].Lead(ctx, key, func(fctx context.Context) error {
					n := inside.Add(1)
					defer inside.Add(-1)
					tok, _ := ormlock.FencingToken(fctx)
					elected <- term{replica: i, token: tok, inside: n}
					select {
					case <-fctx.Done():
						deposed <- context.Cause(fctx)
						return fctx.Err()
					case <-resign[i]:
						return nil
					}
				}, append(opts, ormlock.WithOwner(fmt.Sprintf("replica-%d", i)))...)
			}()
		}
		first := recv(t, elected, 15*time.Second, "leader")
		if first.inside != 1 {
			t.Fatalf("first leader saw %d leaders inside fn", first.inside)
		}
		// the leader freezes: its renewals stop
		resume := stopRenewing(t, key)
		cause := recv(t, deposed, 10*time.Second, "deposition of the frozen leader")
		if !errors.Is(cause, ormlock.ErrLockLost) {
			t.Fatalf("deposed leader's cause = %v, want ErrLockLost", cause)
		}
		second := recv(t, elected, 15*time.Second, "leader after the freeze")
		if second.inside != 1 || second.token <= first.token {
			t.Fatalf("second term: %+v after %+v, want one leader and a greater token", second, first)
		}
		// renewals back: the second leader stays; then it resigns
		resume()
		close(resign[second.replica])
		if err := recv(t, results, 15*time.Second, "return of the resigned Lead"); err != nil {
			t.Fatalf("resigned Lead: %v", err)
		}
		third := recv(t, elected, 15*time.Second, "leader after the resignation")
		if third.replica == second.replica || third.token <= second.token {
			t.Fatalf("third term: %+v after %+v", third, second)
		}
		cancel()
		for range len(rs) - 1 {
			if err := recv(t, results, 15*time.Second, "return of Lead after cancel"); !errors.Is(err, context.Canceled) {
				t.Errorf("Lead after cancel = %v, want context.Canceled", err)
			}
		}
		if n := liveLeases(t, k, leaseTableOf(t, k)); n != 0 {
			t.Fatalf("%d leases left unexpired", n)
		}
	})
}
