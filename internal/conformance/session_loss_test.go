package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/leakcheck"
	"github.com/ormlock/ormlock/internal/testdb"
)

// lockHolder returns the server connection id (PostgreSQL backend pid,
// MySQL/MariaDB connection id) that holds key, as r's Holder reports it.
func lockHolder(ctx context.Context, r runner, key string) (int64, error) {
	h, err := r.Holder(ctx, key)
	if err != nil || !h.Held {
		return 0, fmt.Errorf("holder of %q: %+v %v", key, h, err)
	}
	return h.PID, nil
}

// A hung server (the lock's backend stopped with SIGSTOP) is a lost lock
// too: the keepalive's check times out, and fn's context ends with
// ErrLockLost within two intervals plus slack.
func TestSessionHungServer(t *testing.T) {
	leakcheck.Goroutines(t, testdb.Postgres, testdb.PgBouncer)
	forEachPostgres(t, func(t *testing.T, a adapter, k testdb.Kind) {
		if testdb.LogPath(t, k) == "" {
			t.Skip("the server is external (DSN env var): its backends are not processes of this machine")
		}
		const keepalive = 200 * time.Millisecond
		const lossBound = 2*keepalive + 2*time.Second
		r := openRunner(t, a, k)
		key := "s-hung-" + t.Name()
		var detected time.Duration
		err := r.Session(context.Background(), key, func(ctx context.Context) error {
			pid, err := lockHolder(ctx, r, key)
			if err != nil {
				return err
			}
			if err := syscall.Kill(int(pid), syscall.SIGSTOP); err != nil {
				return fmt.Errorf("stop backend %d: %w", pid, err)
			}
			defer syscall.Kill(int(pid), syscall.SIGCONT)
			start := time.Now()
			select {
			case <-ctx.Done():
				detected = time.Since(start)
			case <-time.After(15 * time.Second):
				return errors.New("fn's context not cancelled within 15s")
			}
			return ctx.Err()
		}, ormlock.WithKeepalive(keepalive))
		t.Logf("loss seen %v after the backend stopped (keepalive %v); Session: %v", detected.Round(time.Millisecond), keepalive, err)
		if !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("Session error = %v, want ErrLockLost", err)
		}
		if detected > lossBound {
			t.Errorf("loss seen after %v, want within %v", detected, lossBound)
		}
	})
}

// Keepalive checks racing fn's return and the release: with a keepalive of
// a few milliseconds, checks start as fn returns, and some time out (a
// timed-out check is a loss). Every Session must end cleanly (nil or
// ErrLockLost), with nothing left behind; run with -race.
func TestSessionKeepaliveRace(t *testing.T) {
	leakcheck.Goroutines(t)
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		const workers, runs = 2, 30
		key := "s-race-" + t.Name()
		var mu sync.Mutex
		outcomes := map[string]int{}
		var wg sync.WaitGroup
		for w := range workers {
			l := a.open(t, k)
			wg.Go(func() {
				for i := range runs {
					err := l.Session(context.Background(), key, func(ctx context.Context) error {
						select {
						case <-ctx.Done():
						case <-time.After(time.Duration((i+w)%7) * time.Millisecond):
						}
						return nil
					}, ormlock.WithKeepalive(3*time.Millisecond), ormlock.WithWait(5*time.Second))
					what := "ok"
					switch {
					case err == nil:
					case errors.Is(err, ormlock.ErrLockLost):
						what = "lost"
					default:
						t.Errorf("worker %d run %d: %v", w, i, err)
						what = "error"
					}
					mu.Lock()
					outcomes[what]++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		t.Logf("%d Sessions with a 3ms keepalive: %v", workers*runs, outcomes)
	})
}

// A loss that the keepalive has not seen by the time fn returns is reported
// by the release (release_failed, ErrLockLost), and the dead connection is
// not given back to the pool.
func TestSessionLossSeenAtRelease(t *testing.T) {
	leakcheck.Goroutines(t)
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		var ev testdb.Recorder
		r := a.with(t, k, ormlock.WithObserver(&ev))
		key := "s-lost-rel-" + t.Name()
		err := r.Session(context.Background(), key, func(ctx context.Context) error {
			id, err := lockHolder(ctx, r, key)
			if err != nil {
				return err
			}
			testdb.Kill(t, k, id)
			testdb.WaitGone(t, k, id)
			return nil
		}, ormlock.WithKeepalive(time.Hour))
		if !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("Session error = %v, want ErrLockLost", err)
		}
		if kinds := ev.Kinds(); kinds[len(kinds)-1] != ormlock.EventReleaseFailed {
			t.Errorf("events = %v, want release_failed last", kinds)
		}
		if _, err := r.Pool().Exec("SELECT 1"); err != nil {
			t.Fatalf("pool after the loss: %v", err)
		}
	})
}

// On MariaDB, a release that fails on a live connection that still holds
// the lock destroys that connection, so the server frees the lock, and
// Session reports the lock as lost. The adapters run one after the other:
// the failure is made with a server-wide setting.
func TestSessionReleaseFailureDestroysConnection(t *testing.T) {
	leakcheck.Goroutines(t, testdb.MariaDB)
	k := testdb.MariaDB
	admin := testdb.AdminDB(t, k)
	for _, a := range adapters {
		if a.name == "pgxlock" {
			continue // PostgreSQL only
		}
		t.Run(a.name, func(t *testing.T) {
			var ev testdb.Recorder
			r := a.with(t, k, ormlock.WithObserver(&ev))
			r.Pool().SetMaxIdleConns(4)
			key := "s-relfail-" + t.Name()
			var prev int64
			if err := admin.QueryRow("SELECT @@GLOBAL.max_prepared_stmt_count").Scan(&prev); err != nil {
				t.Fatal(err)
			}
			restore := func() {
				if _, err := admin.Exec(fmt.Sprintf("SET GLOBAL max_prepared_stmt_count = %d", prev)); err != nil {
					t.Errorf("restore max_prepared_stmt_count: %v", err)
				}
			}
			t.Cleanup(restore)
			var lockID int64
			err := r.Session(context.Background(), key, func(ctx context.Context) error {
				var err error
				if lockID, err = lockHolder(ctx, r, key); err != nil {
					return err
				}
				// From now on the server refuses to prepare statements, so
				// the release (RELEASE_LOCK(?), a prepared statement) fails
				// on a live connection that still holds the lock. Given
				// back to the pool, that connection would keep the lock
				// forever.
				_, err = admin.Exec("SET GLOBAL max_prepared_stmt_count = 0")
				return err
			})
			restore()
			if !errors.Is(err, ormlock.ErrLockLost) {
				t.Fatalf("Session error = %v, want ErrLockLost", err)
			}
			if kinds := ev.Kinds(); kinds[len(kinds)-1] != ormlock.EventReleaseFailed {
				t.Errorf("events = %v, want release_failed last", kinds)
			}
			testdb.WaitGone(t, k, lockID)
			if !free(t, k, key) {
				t.Fatal("lock still held after the failed release")
			}
			for range 3 {
				var id int64
				if err := r.Pool().QueryRow("SELECT CONNECTION_ID()").Scan(&id); err != nil {
					t.Fatal(err)
				}
				if id == lockID {
					t.Fatal("destroyed lock connection handed out again")
				}
			}
		})
	}
}
