package conformance_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// The lock shapes as leases, in Session and Transaction: All excludes
// every other holder of any of its keys, Semaphore(k, 2) lets at most two
// in, and nothing is left after the release.
func TestLeaseShapesExclusion(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		const instances, rounds = 4, 8
		r := openRunner(t, a, k)
		opts := leaseOpts(t, k, r, 5*time.Second)
		ls := []runner{r}
		for len(ls) < instances {
			ls = append(ls, openRunner(t, a, k))
		}
		base := "lease-shape-" + t.Name()
		shapes := []struct {
			name  string
			key   func(i int) ormlock.Key
			limit int64
		}{
			{"all", func(i int) ormlock.Key {
				if i%2 == 0 {
					return ormlock.All(ormlock.Name(base+"a"), ormlock.Name(base+"b"))
				}
				return ormlock.All(ormlock.Name(base+"c"), ormlock.Name(base+"b"))
			}, 1},
			{"semaphore", func(int) ormlock.Key { return ormlock.Semaphore(ormlock.Name(base+"sem"), 2) }, 2},
		}
		for _, sh := range shapes {
			var in testdb.Holders
			wins := 0
			for round := range rounds {
				var wg sync.WaitGroup
				gate := make(chan struct{})
				errs := make([]error, instances)
				for i, l := range ls {
					wg.Go(func() {
						<-gate
						body := func() error {
							defer in.Enter()()
							time.Sleep(3 * time.Millisecond)
							return nil
						}
						if (round+i)%2 == 0 {
							errs[i] = l.Session(context.Background(), sh.key(i), func(context.Context) error { return body() }, opts...)
						} else {
							errs[i] = l.Transaction(context.Background(), sh.key(i), func(txn) error { return body() }, opts...)
						}
					})
				}
				close(gate)
				wg.Wait()
				for _, err := range errs {
					switch {
					case err == nil:
						wins++
					case !errors.Is(err, ormlock.ErrNotAcquired):
						t.Fatalf("%s round %d: %v", sh.name, round, err)
					}
				}
			}
			if got := in.Max(); got > sh.limit || got == 0 {
				t.Fatalf("%s: max holders inside fn at once = %d, want 1..%d", sh.name, got, sh.limit)
			}
			t.Logf("%s: %d wins in %d rounds, at most %d inside", sh.name, wins, rounds, in.Max())
		}
		if n := liveLeases(t, k, leaseTableOf(t, k)); n != 0 {
			t.Fatalf("%d leases left unexpired after the release", n)
		}
	})
}

// Shared(k) as a lease, on every server (MySQL/MariaDB included, whose
// named locks have no shared mode): readers hold together, a writer is
// refused while any reader holds and a reader while the writer holds, and
// the last reader's release lets the writer in at once.
func TestLeaseShared(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		const readers = 3
		r := openRunner(t, a, k)
		opts := leaseOpts(t, k, r, 5*time.Second)
		key := "lease-shared-" + t.Name()
		ctx := context.Background()
		var wg sync.WaitGroup
		inside := make(chan struct{}, readers)
		leave := make(chan struct{})
		errs := make([]error, readers)
		for i := range readers {
			l := openRunner(t, a, k)
			wg.Go(func() {
				errs[i] = l.Session(ctx, ormlock.Shared(ormlock.Name(key)), func(context.Context) error {
					inside <- struct{}{}
					<-leave
					return nil
				}, opts...)
			})
		}
		for range readers {
			select {
			case <-inside:
			case <-time.After(10 * time.Second):
				close(leave)
				wg.Wait()
				t.Fatalf("readers did not hold together: %v", errs)
			}
		}
		werr := r.Session(ctx, key, func(context.Context) error { return errors.New("a writer ran beside readers") }, opts...)
		terr := r.Transaction(ctx, key, func(txn) error { return errors.New("a writer ran beside readers") }, opts...)
		close(leave)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("reader %d: %v", i, err)
			}
		}
		if !errors.Is(werr, ormlock.ErrNotAcquired) || !errors.Is(terr, ormlock.ErrNotAcquired) {
			t.Fatalf("writer beside readers: %v / %v, want ErrNotAcquired", werr, terr)
		}
		err := r.Session(ctx, key, func(ctx context.Context) error {
			return r.Session(ctx, ormlock.Shared(ormlock.Name(key)), func(context.Context) error { return errors.New("a reader ran beside the writer") }, opts...)
		}, opts...)
		if !errors.Is(err, ormlock.ErrNotAcquired) {
			t.Fatalf("reader beside the writer (after the readers left): %v, want ErrNotAcquired", err)
		}
		if n := liveLeases(t, k, leaseTableOf(t, k)); n != 0 {
			t.Fatalf("%d leases left unexpired after the release", n)
		}
	})
}
