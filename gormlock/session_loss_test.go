package gormlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/leakcheck"
	"github.com/ormlock/ormlock/internal/testdb"
)

// The protocol's behaviour on a lost Session lock (a hung server, keepalive
// checks racing the release, a loss seen at release, a failed release on
// MariaDB) is tested once for every adapter, in internal/conformance
// (session_loss_test.go). The two below need private servers, which this
// package's helpers start.

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
