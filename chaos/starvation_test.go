package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// A key two replicas wait for, each taking it for a short term again and
// again. A waiter on a shared lock connection (WithSharedLockConns: a
// try-lock repeated with a backoff) against one on a dedicated connection
// (queued on the server, which hands it the lock the moment it is freed)
// wins few terms, if any: mixing the two for a key starves the shared one, as
// docs/PROTOCOL.md (Shared lock connections) says. The remedy it gives,
// every waiter of such a key on a dedicated connection, makes the server's
// queue hand the terms round. Exclusion holds throughout.
func TestSharedWaiterStarves(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			terms := pick(60, 240)
			shared := []ormlock.Option{ormlock.WithSharedLockConns(1), ormlock.WithKeepalive(200 * time.Millisecond)}
			wins := contend(t, k, "starve-mixed-"+string(k), terms, nil, shared)
			t.Logf("dedicated vs shared waiter, %d terms: %v", terms, wins)
			if wins[1] > terms/4 { // measured: 0 to 7 in 100 on loopback
				t.Errorf("the shared waiter won %d of %d terms against a dedicated one; the docs say it starves", wins[1], terms)
			}
			wins = contend(t, k, "starve-dedicated-"+string(k), terms, nil, nil)
			t.Logf("two dedicated waiters, %d terms: %v", terms, wins)
			for i, w := range wins {
				if w < terms/4 {
					t.Errorf("dedicated waiter %d won %d of %d terms; the server's queue should hand them round", i, w, terms)
				}
			}
		})
	}
}

// contend runs two replicas, each on a pool of its own with its options,
// taking key for a term of 10 ms (waiting up to a minute) until terms
// terms were held in all, and returns how many each won.
func contend(t *testing.T, k testdb.Kind, key string, terms int, opts ...[]ormlock.Option) [2]int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		held   atomic.Int64 // terms begun
		inside atomic.Int32
		wins   [2]atomic.Int64
		wg     sync.WaitGroup
		errMu  sync.Mutex
		errs   []error
	)
	for i := range 2 {
		db, _ := openGorm(t, k)
		o := append([]ormlock.Option{ormlock.WithWait(time.Minute)}, opts[i]...)
		wg.Go(func() {
			for ctx.Err() == nil {
				err := gormlock.Session(db.WithContext(ctx), ormlock.Name(key), func(fctx context.Context) error {
					if n := inside.Add(1); n != 1 {
						return fmt.Errorf("%d replicas inside at once", n)
					}
					defer inside.Add(-1)
					wins[i].Add(1)
					if held.Add(1) >= int64(terms) {
						cancel()
					}
					select {
					case <-time.After(10 * time.Millisecond):
					case <-fctx.Done():
					}
					return nil
				}, o...)
				if err != nil && !(ctx.Err() != nil && errors.Is(err, context.Canceled)) {
					errMu.Lock()
					errs = append(errs, fmt.Errorf("replica %d: %w", i, err))
					errMu.Unlock()
					return
				}
			}
		})
	}
	select {
	case <-ctx.Done():
	case <-time.After(2 * time.Minute):
		t.Errorf("%d terms not held within 2 minutes (%d were)", terms, held.Load())
		cancel()
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	return [2]int{int(wins[0].Load()), int(wins[1].Load())}
}
