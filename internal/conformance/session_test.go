package conformance_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/leakcheck"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
)

// Sessions from three instances contend for one key, round after round: at
// most one holder inside fn at any instant, someone wins every round, and
// no goroutine is left behind (the keepalive included).
func TestConformanceSessionMutualExclusion(t *testing.T) {
	leakcheck.Goroutines(t)
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		const instances, rounds = 3, 50
		ls := make([]locker, instances)
		for i := range ls {
			ls[i] = a.open(t, k)
		}
		ctx := context.Background()
		key := "conf-s-mutex-" + t.Name()
		var in testdb.Holders
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
						defer in.Enter()()
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
		if got := in.Max(); got != 1 {
			t.Fatalf("max holders inside fn at once = %d, want 1", got)
		}
		if losses == 0 {
			t.Fatalf("no contention seen in %d rounds (wins %d): the test did not exercise exclusion", rounds, wins)
		}
		t.Logf("%d rounds in %v: %d wins, %d ErrNotAcquired", rounds, time.Since(start).Round(time.Millisecond), wins, losses)
	})
}

// MySQL/MariaDB: when RELEASE_LOCK does not confirm the release (here the
// lock was released behind ormlock's back, so it returns NULL), the
// connection is destroyed rather than given back to the pool, and the
// observer hears release_failed.
func TestConformanceReleaseFailureDestroysConnection(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			k := testdb.MariaDB
			r := openRunner(t, a, k)
			pool := r.Pool()
			pool.SetMaxIdleConns(4)
			key := "conf-relfail-" + t.Name()
			rec := &testdb.Recorder{}
			var connID int64
			err := r.Transaction(context.Background(), key, func(tx txn) error {
				var err error
				if connID, err = tx.QueryInt("SELECT CONNECTION_ID()"); err != nil {
					return err
				}
				return tx.Exec("SELECT RELEASE_LOCK(?)", keyhash.MySQLName("", key))
			}, ormlock.WithObserver(rec))
			if err != nil {
				t.Fatal(err)
			}
			if ks := rec.Kinds(); len(ks) == 0 || ks[len(ks)-1] != ormlock.EventReleaseFailed {
				t.Fatalf("events = %v, want release_failed last", ks)
			}
			testdb.WaitGone(t, k, connID)
			// the pool's next connections are other ones
			for range 3 {
				var id int64
				if err := pool.QueryRow("SELECT CONNECTION_ID()").Scan(&id); err != nil {
					t.Fatal(err)
				}
				if id == connID {
					t.Fatal("destroyed connection handed out again")
				}
			}
		})
	}
}
