package gormlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/gormtest"
	"github.com/ormlock/ormlock/internal/leakcheck"
	"github.com/ormlock/ormlock/internal/testdb"
)

// A hung server (its backend stopped with SIGSTOP) is a lost lock too: the
// keepalive's check times out within one interval.
func TestSessionHungServer(t *testing.T) {
	leakcheck.Goroutines(t, testdb.Postgres, testdb.PgBouncer)
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			if testdb.LogPath(t, k) == "" {
				t.Skip("the server is external (DSN env var): its backends are not processes of this machine")
			}
			db, _ := gormtest.Open(t, k)
			admin := testdb.AdminDB(t, k)
			key := "s-hung-" + t.Name()
			var detected time.Duration
			err := gormlock.Session(db, key, func(ctx context.Context) error {
				pid := int(lockConn(t, k.Dialect(), admin, key).id)
				if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
					return fmt.Errorf("stop backend %d: %w", pid, err)
				}
				defer syscall.Kill(pid, syscall.SIGCONT)
				detected = waitDone(t, ctx, 15*time.Second)
				return ctx.Err()
			}, ormlock.WithKeepalive(sessionKeepalive))
			t.Logf("loss seen %v after the backend stopped (keepalive %v); Session: %v", detected.Round(time.Millisecond), sessionKeepalive, err)
			if !errors.Is(err, ormlock.ErrLockLost) {
				t.Fatalf("Session error = %v, want ErrLockLost", err)
			}
			if detected > lossBound {
				t.Errorf("loss seen after %v, want within %v", detected, lossBound)
			}
		})
	}
}

// Keepalive checks racing fn's return and the release: with a keepalive of
// a few milliseconds, checks start as fn returns, and some time out (a
// timed-out check is a loss). Every Session must end cleanly (nil or
// ErrLockLost), with nothing left behind; run with -race.
func TestSessionKeepaliveRace(t *testing.T) {
	leakcheck.Goroutines(t)
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		const workers, runs = 2, 30
		key := "s-race-" + t.Name()
		var mu sync.Mutex
		outcomes := map[string]int{}
		var wg sync.WaitGroup
		for w := range workers {
			db, _ := gormtest.Open(t, k)
			wg.Go(func() {
				for i := range runs {
					err := gormlock.Session(db, key, func(ctx context.Context) error {
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
// by the release, and the dead connection is not given back to the pool.
func TestSessionLossSeenAtRelease(t *testing.T) {
	leakcheck.Goroutines(t)
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := gormtest.Open(t, k)
		admin := testdb.AdminDB(t, k)
		key := "s-lost-rel-" + t.Name()
		var ev testdb.Recorder
		err := gormlock.Session(db, key, func(ctx context.Context) error {
			id := lockConn(t, k.Dialect(), admin, key).id
			testdb.KillOn(t, k.Dialect(), admin, id)
			testdb.WaitGoneOn(t, k.Dialect(), admin, id)
			return nil
		}, ormlock.WithKeepalive(time.Hour), ormlock.WithObserver(&ev))
		if !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("Session error = %v, want ErrLockLost", err)
		}
		if kinds := ev.Kinds(); kinds[len(kinds)-1] != ormlock.EventReleaseFailed {
			t.Errorf("events = %v, want release_failed last", kinds)
		}
		if err := db.Exec("SELECT 1").Error; err != nil {
			t.Fatalf("pool after the loss: %v", err)
		}
	})
}

// On MariaDB, a release that fails on a live connection that still holds the
// lock destroys that connection, so the server frees the lock, and Session
// reports the lock as lost.
func TestSessionReleaseFailureDestroysConnection(t *testing.T) {
	leakcheck.Goroutines(t, testdb.MariaDB)
	k := testdb.MariaDB
	db, sqlDB := gormtest.Open(t, k)
	sqlDB.SetMaxIdleConns(4)
	admin := testdb.AdminDB(t, k)
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
	var ev testdb.Recorder
	var lockID int64
	err := gormlock.Session(db, key, func(ctx context.Context) error {
		lockID = lockConn(t, k.Dialect(), admin, key).id
		// From now on the server refuses to prepare statements, so the
		// release (RELEASE_LOCK(?), a prepared statement) fails on a live
		// connection that still holds the lock. Given back to the pool,
		// that connection would keep the lock forever.
		_, err := admin.Exec("SET GLOBAL max_prepared_stmt_count = 0")
		return err
	}, ormlock.WithObserver(&ev))
	restore()
	if !errors.Is(err, ormlock.ErrLockLost) {
		t.Fatalf("Session error = %v, want ErrLockLost", err)
	}
	if kinds := ev.Kinds(); kinds[len(kinds)-1] != ormlock.EventReleaseFailed {
		t.Errorf("events = %v, want release_failed last", kinds)
	}
	testdb.WaitGoneOn(t, k.Dialect(), admin, lockID)
	if !rawFree(t, k, key) {
		t.Fatal("lock still held after the failed release")
	}
	for range 3 {
		var id int64
		if err := sqlDB.QueryRow("SELECT CONNECTION_ID()").Scan(&id); err != nil {
			t.Fatal(err)
		}
		if id == lockID {
			t.Fatal("destroyed lock connection handed out again")
		}
	}
}

// A server restart while fn runs is a lost lock, not a panic, and the next
// Session works once the server is back.
func TestSessionServerRestart(t *testing.T) {
	pgb := privatePgBouncer(t)
	leakcheck.Goroutines(t)
	type target struct {
		name    string
		srv     *testdb.Server // where the pool connects
		restart func(testing.TB)
	}
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		var targets []target
		switch k {
		case testdb.Postgres:
			targets = []target{{"restart", pgb.Backend(), pgb.Backend().Restart}}
		case testdb.PgBouncer:
			targets = []target{
				{"restart pgbouncer", pgb, pgb.Restart},
				{"restart postgres behind it", pgb, pgb.Backend().Restart},
			}
		case testdb.MariaDB:
			s := testdb.Start(t, k)
			targets = []target{{"restart", s, s.Restart}}
		}
		for _, c := range targets {
			t.Run(c.name, func(t *testing.T) {
				db, _, _ := openPrivate(t, c.srv, "")
				key := "s-restart-" + t.Name()
				var detected time.Duration
				err := gormlock.Session(db, key, func(ctx context.Context) error {
					if err := db.WithContext(ctx).Exec("SELECT 1").Error; err != nil {
						return err
					}
					start := time.Now()
					c.restart(t)
					t.Logf("restart took %v", time.Since(start).Round(time.Millisecond))
					detected = time.Since(start) + waitDone(t, ctx, 15*time.Second)
					return ctx.Err()
				}, ormlock.WithKeepalive(sessionKeepalive))
				t.Logf("loss seen %v after the restart began; Session: %v", detected.Round(time.Millisecond), err)
				if !errors.Is(err, ormlock.ErrLockLost) {
					t.Fatalf("Session error = %v, want ErrLockLost", err)
				}
				ran := false
				if err := gormlock.Session(db, key, func(ctx context.Context) error {
					ran = true
					return db.WithContext(ctx).Exec("SELECT 1").Error
				}); err != nil || !ran {
					t.Fatalf("Session after the restart: ran=%v err=%v", ran, err)
				}
			})
		}
	})
}

// A server that kills idle transactions (PostgreSQL's
// idle_in_transaction_session_timeout) or idle connections (MariaDB's
// wait_timeout) sooner than the keepalive interval does not take the lock
// away: the keepalive is clamped below the timeout (PostgreSQL) or the lock
// connection's wait_timeout is raised (MariaDB). When the server kills the
// lock transaction anyway, the loss is reported.
func TestSessionIdleTimeout(t *testing.T) {
	// a private PostgreSQL (and PgBouncer) whose settings the test may change
	srv := privatePgBouncer(t)
	leakcheck.Goroutines(t)
	const job = 5 * time.Second
	padmin, err := sql.Open("pgx", srv.AdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { padmin.Close() })
	// PgBouncer does not pass the options startup parameter on, so its
	// clients get the setting from the database: a database of its own,
	// created before any connection to it.
	t.Cleanup(func() {
		if _, err := padmin.Exec("DROP DATABASE IF EXISTS idle WITH (FORCE)"); err != nil {
			t.Errorf("drop database idle: %v", err)
		}
	})
	for _, q := range []string{
		"DROP DATABASE IF EXISTS idle WITH (FORCE)",
		"CREATE DATABASE idle",
		"ALTER DATABASE idle SET idle_in_transaction_session_timeout = '1500ms'",
	} {
		if _, err := padmin.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	// keep runs a Session for a job longer than the server's timeout, with
	// the default keepalive, and checks that the timeout is real by letting
	// a control connection sit idle (in a transaction, on PostgreSQL) past
	// it. It runs on its own goroutine, so it returns its error.
	keep := func(k testdb.Kind, db *gorm.DB, sqlDB, admin *sql.DB, key string) error {
		start := time.Now()
		err := gormlock.Session(db, key, func(ctx context.Context) error {
			control, err := sqlDB.Conn(ctx)
			if err != nil {
				return err
			}
			defer control.Close()
			if k.Dialect() == "postgres" {
				var v string
				if err := control.QueryRowContext(ctx, "SHOW idle_in_transaction_session_timeout").Scan(&v); err != nil {
					return err
				}
				if v != "1500ms" {
					return fmt.Errorf("idle_in_transaction_session_timeout = %q, want 1500ms", v)
				}
				if _, err := control.ExecContext(ctx, "BEGIN"); err != nil {
					return err
				}
			} else {
				var v int
				if err := control.QueryRowContext(ctx, "SELECT @@session.wait_timeout").Scan(&v); err != nil {
					return err
				}
				if v != 1 {
					return fmt.Errorf("wait_timeout = %d, want 1", v)
				}
			}
			for time.Since(start) < job {
				select {
				case <-ctx.Done():
					return fmt.Errorf("after %v: %w", time.Since(start), context.Cause(ctx))
				case <-time.After(100 * time.Millisecond):
				}
			}
			if _, err := control.ExecContext(ctx, "SELECT 1"); err == nil {
				return errors.New("control connection idle for the whole job was not killed: the server timeout did not bite")
			}
			free, err := lockFree(ctx, k.Dialect(), admin, key)
			if err != nil {
				return err
			}
			if free {
				return errors.New("lock free at the end of fn")
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		return nil
	}

	// The three jobs run at once, to keep the test short.
	t.Run("keeps the lock", func(t *testing.T) {
		type idleJob struct {
			k           testdb.Kind
			db          *gorm.DB
			sqlDB, admn *sql.DB
		}
		var jobs []idleJob
		{
			k := testdb.Postgres
			db, sqlDB := openDSN(t, k, withParam(t, testdb.DSN(t, k), "options=-c%20idle_in_transaction_session_timeout%3D1500"))
			t.Cleanup(func() { testdb.AssertNoLeaks(t, k, sqlDB) })
			jobs = append(jobs, idleJob{k, db, sqlDB, testdb.AdminDB(t, k)})
		}
		{
			db, sqlDB, _ := openPrivate(t, srv, withDatabase(t, srv.DSN(), "idle"))
			admin, err := sql.Open("pgx", withDatabase(t, srv.AdminDSN(), "idle"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { admin.Close() })
			t.Cleanup(func() {
				var n int
				if err := admin.QueryRow("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").Scan(&n); err != nil || n != 0 {
					t.Errorf("advisory locks left on the server: %d (%v)", n, err)
				}
			})
			jobs = append(jobs, idleJob{testdb.PgBouncer, db, sqlDB, admin})
		}
		{
			k := testdb.MariaDB
			db, sqlDB := openDSN(t, k, withParam(t, testdb.DSN(t, k), "wait_timeout=1"))
			t.Cleanup(func() { testdb.AssertNoLeaks(t, k, sqlDB) })
			jobs = append(jobs, idleJob{k, db, sqlDB, testdb.AdminDB(t, k)})
		}
		start := time.Now()
		var wg sync.WaitGroup
		for _, j := range jobs {
			wg.Go(func() {
				if err := keep(j.k, j.db, j.sqlDB, j.admn, "s-idle-"+t.Name()+"-"+string(j.k)); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		t.Logf("three %v jobs ran at once in %v", job, time.Since(start).Round(time.Millisecond))
	})

	t.Run("killed anyway", func(t *testing.T) {
		// Sessions on the private server, straight and through PgBouncer,
		// with no timeout when they start; then the timeout is set below
		// their keepalive for every session (ALTER SYSTEM and a reload).
		const every = time.Second
		targets := []struct {
			k   testdb.Kind
			dsn string
		}{{testdb.Postgres, srv.Backend().DSN()}, {testdb.PgBouncer, srv.DSN()}}
		t.Cleanup(func() {
			for _, q := range []string{"ALTER SYSTEM RESET idle_in_transaction_session_timeout", "SELECT pg_reload_conf()"} {
				if _, err := padmin.Exec(q); err != nil {
					t.Errorf("%s: %v", q, err)
				}
			}
		})
		var acquired, wg sync.WaitGroup
		acquired.Add(len(targets))
		errs := make([]error, len(targets))
		took := make([]time.Duration, len(targets))
		var set time.Time
		setDone := make(chan struct{})
		for i, tg := range targets {
			db, _, _ := openPrivate(t, srv, tg.dsn)
			wg.Go(func() {
				once := sync.OnceFunc(acquired.Done)
				defer once()
				errs[i] = gormlock.Session(db, fmt.Sprintf("s-killed-%s-%d", t.Name(), i), func(ctx context.Context) error {
					once()
					<-setDone
					select {
					case <-ctx.Done():
						took[i] = time.Since(set)
						return ctx.Err()
					case <-time.After(20 * time.Second):
						return errors.New("not killed within 20s")
					}
				}, ormlock.WithKeepalive(every))
			})
		}
		acquired.Wait()
		set = time.Now()
		for _, q := range []string{"ALTER SYSTEM SET idle_in_transaction_session_timeout = '300ms'", "SELECT pg_reload_conf()"} {
			if _, err := padmin.Exec(q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
		close(setDone)
		wg.Wait()
		for i, tg := range targets {
			t.Logf("%s: loss seen %v after the timeout was lowered; Session: %v", tg.k, took[i].Round(time.Millisecond), errs[i])
			if !errors.Is(errs[i], ormlock.ErrLockLost) {
				t.Errorf("%s: Session error = %v, want ErrLockLost", tg.k, errs[i])
			}
		}
	})
}
