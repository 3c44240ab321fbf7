package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/leakcheck"
)

// A Session lock taken away by the server itself: a server restart while fn
// runs, and a server that kills idle transactions or connections. Both need
// private servers (the test restarts them or changes their settings), so
// every adapter holds its Session on the same server at once and the server
// is restarted or reconfigured once for all of them.

// onPrivate is one adapter's runner on a pool of its own to dsn, a DSN of
// the private server s; nothing may leak on s when the test ends.
type onPrivate struct {
	a  adapter
	r  runner
	db *sql.DB // the pool the runner was built on
}

// openOnPrivate opens, for every adapter that runs on s's dialect, a runner
// on a new pool to dsn (s.DSN() when empty).
func openOnPrivate(t *testing.T, s *testdb.Server, dsn string) []onPrivate {
	t.Helper()
	if dsn == "" {
		dsn = s.DSN()
	}
	k := s.Kind()
	var out []onPrivate
	for _, a := range adapters {
		if !runsOn(a, k) {
			continue
		}
		db, err := sql.Open(k.Driver(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		t.Cleanup(func() { s.AssertNoLeaks(t, db) })
		out = append(out, onPrivate{a, a.on(t, k.Dialect(), db), db})
	}
	return out
}

// inAll runs a Session of every runner at once, each on a key of its own
// (key and the adapter's name). Once all hold their locks, act runs on the
// caller's goroutine; then every fn runs during with its key. It returns
// the Sessions' errors.
func inAll(rs []onPrivate, key string, act func(), during func(ctx context.Context, key string) error, opts ...ormlock.Option) []error {
	errs := make([]error, len(rs))
	var held, wg sync.WaitGroup
	held.Add(len(rs))
	acted := make(chan struct{})
	for i, p := range rs {
		wg.Go(func() {
			once := sync.OnceFunc(held.Done)
			defer once() // a Session that fails to acquire does not hold the others up
			key := key + "-" + p.a.name
			errs[i] = p.r.Session(context.Background(), key, func(ctx context.Context) error {
				once()
				<-acted
				return during(ctx, key)
			}, opts...)
		})
	}
	held.Wait()
	act()
	close(acted)
	wg.Wait()
	return errs
}

// ctxEnds waits for ctx to end, up to limit, and returns how long it took.
func ctxEnds(ctx context.Context, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	select {
	case <-ctx.Done():
		return time.Since(start), nil
	case <-time.After(limit):
		return 0, fmt.Errorf("fn's context not cancelled within %v", limit)
	}
}

// A server restart while fn runs is a lost lock, not a panic, and the next
// Session works once the server is back: PostgreSQL, PgBouncer, the
// PostgreSQL behind PgBouncer and MariaDB, for every adapter.
func TestSessionServerRestart(t *testing.T) {
	leakcheck.Goroutines(t)
	srvs := testdb.StartAll(t, testdb.PgBouncer, testdb.MariaDB)
	pgb, my := srvs[0], srvs[1]
	targets := []struct {
		name    string
		srv     *testdb.Server // where the pools connect
		restart func(testing.TB)
	}{
		{"postgres", pgb.Backend(), pgb.Backend().Restart},
		{"pgbouncer", pgb, pgb.Restart},
		{"postgres-behind-pgbouncer", pgb, pgb.Backend().Restart},
		{"mariadb", my, my.Restart},
	}
	const keepalive = 200 * time.Millisecond
	for _, c := range targets {
		t.Run(c.name, func(t *testing.T) {
			rs := openOnPrivate(t, c.srv, "")
			key := "s-restart-" + t.Name()
			var began time.Time
			errs := inAll(rs, key, func() {
				began = time.Now()
				c.restart(t)
				t.Logf("restart took %v", time.Since(began).Round(time.Millisecond))
			}, func(ctx context.Context, _ string) error {
				if _, err := ctxEnds(ctx, 15*time.Second); err != nil {
					return err
				}
				t.Logf("loss seen %v after the restart began", time.Since(began).Round(time.Millisecond))
				return ctx.Err()
			}, ormlock.WithKeepalive(keepalive))
			for i, p := range rs {
				if !errors.Is(errs[i], ormlock.ErrLockLost) {
					t.Errorf("%s: Session error = %v, want ErrLockLost", p.a.name, errs[i])
					continue
				}
				ran := false
				if err := p.r.Session(context.Background(), key+"-"+p.a.name, func(ctx context.Context) error {
					ran = true
					_, err := p.db.ExecContext(ctx, "SELECT 1")
					return err
				}); err != nil || !ran {
					t.Errorf("%s: Session after the restart: ran=%v err=%v", p.a.name, ran, err)
				}
			}
		})
	}
}

// A server that kills idle transactions (PostgreSQL's
// idle_in_transaction_session_timeout) or idle connections (MariaDB's
// wait_timeout) sooner than the keepalive interval does not take the lock
// away: the keepalive is clamped below the timeout (PostgreSQL) or the lock
// connection's wait_timeout is raised (MariaDB). When the server kills the
// lock transaction anyway, the loss is reported.
func TestSessionIdleTimeout(t *testing.T) {
	leakcheck.Goroutines(t)
	// a private PostgreSQL (and PgBouncer) whose settings the test changes
	srv := testdb.Start(t, testdb.PgBouncer)
	padmin, err := sql.Open("pgx", srv.AdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { padmin.Close() })
	// PgBouncer does not pass the options startup parameter on, so its
	// clients get the setting from the database: a database of its own,
	// created before any connection to it.
	for _, q := range []string{
		"CREATE DATABASE idle",
		"ALTER DATABASE idle SET idle_in_transaction_session_timeout = '1500ms'",
	} {
		if _, err := padmin.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	t.Run("keeps the lock", func(t *testing.T) {
		// a job longer than the server's timeout, on every adapter and
		// kind at once, to keep the test short
		const job = 5 * time.Second
		type idleJob struct {
			k       testdb.Kind
			p       onPrivate
			control *sql.DB // a pool of the same settings, for the control connection
			admin   *sql.DB // straight to the server, to see the lock
		}
		var jobs []idleJob
		add := func(k testdb.Kind, rs []onPrivate, admin *sql.DB) {
			for _, p := range rs {
				jobs = append(jobs, idleJob{k, p, p.db, admin})
			}
		}
		for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
			params := "options=-c%20idle_in_transaction_session_timeout%3D1500"
			if k == testdb.MariaDB {
				params = "wait_timeout=1"
			}
			var rs []onPrivate
			for _, a := range adapters {
				if !runsOn(a, k) {
					continue
				}
				db := openWith(t, k, params)
				t.Cleanup(func() { closeChecked(t, k, db) })
				rs = append(rs, onPrivate{a, a.on(t, k.Dialect(), db), db})
			}
			add(k, rs, testdb.AdminDB(t, k))
		}
		{
			admin, err := sql.Open("pgx", testdb.WithDatabase(t, srv.AdminDSN(), "idle"))
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
			add(testdb.PgBouncer, openOnPrivate(t, srv, testdb.WithDatabase(t, srv.DSN(), "idle")), admin)
		}
		start := time.Now()
		var wg sync.WaitGroup
		for _, j := range jobs {
			wg.Go(func() {
				key := "s-idle-" + t.Name() + "-" + string(j.k) + "-" + j.p.a.name
				if err := j.p.r.Session(context.Background(), key, func(ctx context.Context) error {
					return keepsIdle(ctx, j.k, j.control, j.admin, key, start.Add(job))
				}); err != nil {
					t.Errorf("%s on %s: %v", j.p.a.name, j.k, err)
				}
			})
		}
		wg.Wait()
		t.Logf("%d %v jobs ran at once in %v", len(jobs), job, time.Since(start).Round(time.Millisecond))
	})

	t.Run("killed anyway", func(t *testing.T) {
		// Sessions on the private server, straight and through PgBouncer,
		// with no timeout when they start; then the timeout is set below
		// their keepalive for every session (ALTER SYSTEM and a reload).
		t.Cleanup(func() {
			for _, q := range []string{"ALTER SYSTEM RESET idle_in_transaction_session_timeout", "SELECT pg_reload_conf()"} {
				if _, err := padmin.Exec(q); err != nil {
					t.Errorf("%s: %v", q, err)
				}
			}
		})
		straight := openOnPrivate(t, srv, srv.Backend().DSN())
		pooled := openOnPrivate(t, srv, "")
		for i := range pooled {
			pooled[i].a.name += "/pgbouncer" // keys and reports of their own
		}
		rs := append(straight, pooled...)
		var set time.Time
		errs := inAll(rs, "s-killed-"+t.Name(), func() {
			set = time.Now()
			for _, q := range []string{"ALTER SYSTEM SET idle_in_transaction_session_timeout = '300ms'", "SELECT pg_reload_conf()"} {
				if _, err := padmin.Exec(q); err != nil {
					t.Errorf("%s: %v", q, err)
				}
			}
		}, func(ctx context.Context, _ string) error {
			if _, err := ctxEnds(ctx, 20*time.Second); err != nil {
				return err
			}
			return ctx.Err()
		}, ormlock.WithKeepalive(time.Second))
		t.Logf("all losses seen %v after the timeout was lowered", time.Since(set).Round(time.Millisecond))
		for i, p := range rs {
			if !errors.Is(errs[i], ormlock.ErrLockLost) {
				t.Errorf("%s: Session error = %v, want ErrLockLost", p.a.name, errs[i])
			}
		}
	})
}

// keepsIdle is fn of a Session on a pool whose server kills idle
// transactions (PostgreSQL, 1500ms) or connections (MariaDB, 1s): it runs
// until end, then checks that the timeout is real (a control connection
// left idle, in a transaction on PostgreSQL, for as long is killed) and that
// the lock on key is still held.
func keepsIdle(ctx context.Context, k testdb.Kind, pool, admin *sql.DB, key string, end time.Time) error {
	control, err := pool.Conn(ctx)
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
	select {
	case <-ctx.Done():
		return fmt.Errorf("before the job's end: %w", context.Cause(ctx))
	case <-time.After(time.Until(end)):
	}
	if _, err := control.ExecContext(ctx, "SELECT 1"); err == nil {
		return errors.New("control connection idle for the whole job was not killed: the server timeout did not bite")
	}
	free, err := testdb.RawFreeOn(ctx, k.Dialect(), admin, "", key)
	if err != nil {
		return err
	}
	if free {
		return errors.New("lock free at the end of fn")
	}
	return nil
}
