package conformance_test

import (
	"context"
	"errors"
	"fmt"
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

// The Session's lock connection ends behind its back: fn's context ends
// with ErrLockLost as its cause within two keepalive intervals (plus slack),
// the Session returns ErrLockLost joined with fn's ctx.Err(), the observer
// hears lock_lost, the lock is free, and the pool and the next Session
// work. No goroutine is left behind.
func TestSessionLockLost(t *testing.T) {
	leakcheck.Goroutines(t)
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		const keepalive = 200 * time.Millisecond
		const lossBound = 2*keepalive + 2*time.Second
		ctx := context.Background()
		var ev testdb.Recorder
		r := a.with(t, k, ormlock.WithObserver(&ev))
		key := "s-lost-" + t.Name()
		var detected time.Duration
		var cause error
		var lockID int64
		err := r.Session(ctx, key, func(ctx context.Context) error {
			h, err := r.Holder(ctx, key)
			if err != nil || !h.Held {
				return fmt.Errorf("holder: %v %v", h, err)
			}
			lockID = h.PID
			testdb.Kill(t, k, lockID)
			start := time.Now()
			select {
			case <-ctx.Done():
				detected = time.Since(start)
			case <-time.After(15 * time.Second):
				return errors.New("fn's context not cancelled within 15s")
			}
			cause = context.Cause(ctx)
			return ctx.Err()
		}, ormlock.WithKeepalive(keepalive))
		t.Logf("loss seen %v after the kill (keepalive %v); Session: %v", detected.Round(time.Millisecond), keepalive, err)
		if !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("Session error = %v, want ErrLockLost", err)
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Session error = %v, want fn's ctx.Err() joined in", err)
		}
		if !errors.Is(cause, ormlock.ErrLockLost) {
			t.Fatalf("context.Cause(ctx) = %v, want ErrLockLost", cause)
		}
		if detected > lossBound {
			t.Errorf("loss seen after %v, want within %v (two intervals plus slack)", detected, lossBound)
		}
		if ev.Count(ormlock.EventLockLost) == 0 {
			t.Errorf("events = %v, want lock_lost", ev.Kinds())
		}
		testdb.WaitGone(t, k, lockID)
		if !free(t, k, key) {
			t.Fatal("lock still held after loss")
		}
		// the job's own pool keeps working, and so does the next Session
		if err := r.Pool().PingContext(ctx); err != nil {
			t.Fatalf("pool after the loss: %v", err)
		}
		if _, err := r.Pool().ExecContext(ctx, "SELECT 1"); err != nil {
			t.Fatalf("pool after the loss: %v", err)
		}
		if err := r.Session(ctx, key, func(ctx context.Context) error {
			_, err := r.Pool().ExecContext(ctx, "SELECT 1")
			return err
		}); err != nil {
			t.Fatalf("next Session: %v", err)
		}
	})
}
