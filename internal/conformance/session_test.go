package conformance_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// Sessions from three instances contend for one key, round after round: at
// most one holder inside fn at any instant, someone wins every round, and
// no goroutine is left behind (the keepalive included).
func TestConformanceSessionMutualExclusion(t *testing.T) {
	testdb.CheckGoroutines(t)
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		const instances, rounds = 3, 50
		ls := make([]locker, instances)
		for i := range ls {
			ls[i] = a.open(t, k)
		}
		ctx := context.Background()
		key := "conf-s-mutex-" + t.Name()
		var inside, maxInside atomic.Int64
		wins, losses := 0, 0
		start := time.Now()
		for r := range rounds {
			var wg sync.WaitGroup
			gate := make(chan struct{})
			errs := make([]error, instances)
			for i, l := range ls {
				wg.Go(func() {
					<-gate
					errs[i] = l.Session(ctx, key, func(ctx context.Context) error {
						maxOf(&maxInside, inside.Add(1))
						defer inside.Add(-1)
						time.Sleep(2 * time.Millisecond)
						return ctx.Err()
					})
				})
			}
			close(gate)
			wg.Wait()
			roundWins := 0
			for _, err := range errs {
				switch {
				case err == nil:
					roundWins++
				case errors.Is(err, ormlock.ErrNotAcquired):
					losses++
				default:
					t.Fatalf("round %d: unexpected error: %v", r, err)
				}
			}
			if roundWins == 0 {
				t.Fatalf("round %d: nobody acquired a free lock", r)
			}
			wins += roundWins
		}
		if got := maxInside.Load(); got != 1 {
			t.Fatalf("max holders inside fn at once = %d, want 1", got)
		}
		if losses == 0 {
			t.Fatalf("no contention seen in %d rounds (wins %d): the test did not exercise exclusion", rounds, wins)
		}
		t.Logf("%d rounds in %v: %d wins, %d ErrNotAcquired", rounds, time.Since(start).Round(time.Millisecond), wins, losses)
	})
}
