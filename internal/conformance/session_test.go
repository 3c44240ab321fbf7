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
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/leakcheck"
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
			err = awaitLoss(ctx)
			detected = time.Since(start)
			cause = context.Cause(ctx)
			return err
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

// Session and Transaction on the same key exclude each other, both ways.
func TestSessionExcludesTransaction(t *testing.T) {
	leakcheck.Goroutines(t)
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		sdb, tdb := a.open(t, k), a.open(t, k)
		key := "s-vs-tx-" + t.Name()
		err := sdb.Session(ctx, key, func(ctx context.Context) error {
			err := tdb.Transaction(ctx, key, func(txn) error { return errors.New("Transaction ran while a Session held the lock") })
			if !errors.Is(err, ormlock.ErrNotAcquired) {
				return fmt.Errorf("Transaction during a Session: %v, want ErrNotAcquired", err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		err = tdb.Transaction(ctx, key, func(txn) error {
			err := sdb.Session(ctx, key, func(context.Context) error { return errors.New("Session ran while a Transaction held the lock") })
			if !errors.Is(err, ormlock.ErrNotAcquired) {
				return fmt.Errorf("Session during a Transaction: %v, want ErrNotAcquired", err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}

		// and racing each other
		const rounds = 50
		var h testdb.Holders
		sWins, tWins := 0, 0
		for r := 0; r < rounds; r++ {
			var wg sync.WaitGroup
			gate := make(chan struct{})
			var serr, terr error
			wg.Go(func() {
				<-gate
				serr = sdb.Session(ctx, key, func(ctx context.Context) error {
					defer h.Enter()()
					time.Sleep(2 * time.Millisecond)
					return nil
				})
			})
			wg.Go(func() {
				<-gate
				terr = tdb.Transaction(ctx, key, func(tx txn) error {
					defer h.Enter()()
					time.Sleep(2 * time.Millisecond)
					_, err := tx.QueryInt("SELECT 1")
					return err
				})
			})
			close(gate)
			wg.Wait()
			for _, e := range []error{serr, terr} {
				if e != nil && !errors.Is(e, ormlock.ErrNotAcquired) {
					t.Fatalf("round %d: %v", r, e)
				}
			}
			if serr == nil {
				sWins++
			}
			if terr == nil {
				tWins++
			}
		}
		if got := h.Max(); got != 1 {
			t.Fatalf("max holders at once = %d, want 1", got)
		}
		t.Logf("%d rounds: Session won %d, Transaction won %d", rounds, sWins, tWins)
	})
}

// Unlock on every path: completion, fn's error (returned unchanged), panic
// (re-panicked).
func TestSessionUnlock(t *testing.T) {
	leakcheck.Goroutines(t)
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		db := a.open(t, k)
		key := "s-unlock-" + t.Name()
		var ev testdb.Recorder
		err := db.Session(ctx, key, func(ctx context.Context) error {
			if free(t, k, key) {
				return errors.New("lock free inside fn")
			}
			return ctx.Err()
		}, ormlock.WithObserver(&ev))
		if err != nil {
			t.Fatal(err)
		}
		if !free(t, k, key) {
			t.Fatal("lock held after Session returned")
		}
		want := []ormlock.EventKind{ormlock.EventAttempt, ormlock.EventAcquired, ormlock.EventReleased}
		if got := ev.Kinds(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("events = %v, want %v", got, want)
		}

		boom := errors.New("boom")
		err = db.Session(ctx, key, func(context.Context) error { return boom })
		if err != boom {
			t.Fatalf("err = %v, want fn's error unchanged", err)
		}
		if !free(t, k, key) {
			t.Fatal("lock held after fn error")
		}

		var got any
		func() {
			defer func() { got = recover() }()
			_ = db.Session(ctx, key, func(context.Context) error { panic("kaboom") })
		}()
		if got != "kaboom" {
			t.Fatalf("recovered %v, want the original panic value", got)
		}
		if !free(t, k, key) {
			t.Fatal("lock held after panic")
		}
	})
}

// Try-once, waiting and context cancellation while waiting, as in
// Transaction; a caller's cancellation inside fn is not a lost lock.
func TestSessionWaitAndContext(t *testing.T) {
	leakcheck.Goroutines(t)
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		db := a.open(t, k)
		key := "s-wait-" + t.Name()
		release := testdb.RawHold(t, k, "", key)
		called := false
		fn := func(context.Context) error { called = true; return nil }

		if err := db.Session(context.Background(), key, fn); !errors.Is(err, ormlock.ErrNotAcquired) || called {
			t.Fatalf("try-once: err=%v called=%v, want ErrNotAcquired", err, called)
		}
		if err := db.Session(context.Background(), key, fn, ormlock.WithWait(300*time.Millisecond)); !errors.Is(err, ormlock.ErrNotAcquired) || called {
			t.Fatalf("wait timeout: err=%v called=%v, want ErrNotAcquired", err, called)
		}

		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(200*time.Millisecond, cancel)
		err := db.Session(ctx, key, fn, ormlock.WithWait(30*time.Second))
		if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) || called {
			t.Fatalf("cancel while waiting: err=%v called=%v, want ErrNotAcquired and context.Canceled", err, called)
		}
		dctx, dcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer dcancel()
		err = db.Session(dctx, key, fn, ormlock.WithWait(30*time.Second))
		if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) || called {
			t.Fatalf("deadline while waiting: err=%v called=%v, want ErrNotAcquired and context.DeadlineExceeded", err, called)
		}
		cctx, ccancel := context.WithCancel(context.Background())
		ccancel()
		if err := db.Session(cctx, key+"-free", fn); !errors.Is(err, context.Canceled) || called {
			t.Fatalf("already cancelled: err=%v called=%v, want context.Canceled", err, called)
		}

		// a wait that outlasts the holder succeeds
		time.AfterFunc(200*time.Millisecond, release)
		start := time.Now()
		if err := db.Session(context.Background(), key, fn, ormlock.WithWait(20*time.Second)); err != nil || !called {
			t.Fatalf("wait for release: err=%v called=%v", err, called)
		}
		t.Logf("acquired after %v of waiting", time.Since(start).Round(time.Millisecond))

		// the caller cancelling during fn ends fn's context, not the lock
		ictx, icancel := context.WithCancel(context.Background())
		var cause error
		err = db.Session(ictx, key, func(ctx context.Context) error {
			icancel()
			<-ctx.Done()
			cause = context.Cause(ctx)
			return ctx.Err()
		})
		if !errors.Is(err, context.Canceled) || errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("caller cancel in fn: err=%v, want context.Canceled and not ErrLockLost", err)
		}
		if !errors.Is(cause, context.Canceled) || errors.Is(cause, ormlock.ErrLockLost) {
			t.Fatalf("caller cancel in fn: cause=%v, want context.Canceled", cause)
		}
		if !free(t, k, key) {
			t.Fatal("lock held after the caller's cancellation")
		}
	})
}

// lockHolder returns the server connection id (PostgreSQL backend pid,
// MySQL/MariaDB connection id) that holds key, as r's Holder reports it.
func lockHolder(ctx context.Context, r runner, key string) (int64, error) {
	h, err := r.Holder(ctx, key)
	if err != nil || !h.Held {
		return 0, fmt.Errorf("holder of %q: %+v %v", key, h, err)
	}
	return h.PID, nil
}

// awaitLoss waits until ctx, fn's context in a Session, ends (the library
// saw the lock's loss) and returns its error; it gives up after 30s.
func awaitLoss(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(30 * time.Second):
		return errors.New("loss not seen within 30s")
	}
}

// killHolder terminates the server connection that holds key (a Session's
// lock connection) and waits until it is gone: the lock is lost behind the
// library's back.
func killHolder(ctx context.Context, t *testing.T, k testdb.Kind, r runner, key string) error {
	t.Helper()
	id, err := lockHolder(ctx, r, key)
	if err != nil {
		return err
	}
	testdb.Kill(t, k, id)
	testdb.WaitGone(t, k, id)
	return nil
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
			err = awaitLoss(ctx)
			detected = time.Since(start)
			return err
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
// 10 ms (WithKeepalive's floor), checks start as fn returns, and some time out (a
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
					}, ormlock.WithKeepalive(10*time.Millisecond), ormlock.WithWait(5*time.Second))
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
		t.Logf("%d Sessions with a 10ms keepalive: %v", workers*runs, outcomes)
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
			return killHolder(ctx, t, k, r, key)
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
