package testdb_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ormlock/ormlock/internal/testdb"
)

func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestKinds(t *testing.T) {
	want := map[testdb.Kind]string{testdb.Postgres: "postgres", testdb.PgBouncer: "postgres", testdb.MariaDB: "mysql"}
	ks := testdb.Kinds()
	if len(ks) != 3 || ks[0] != testdb.Postgres || ks[1] != testdb.PgBouncer || ks[2] != testdb.MariaDB {
		t.Fatalf("Kinds() = %v", ks)
	}
	for _, k := range ks {
		if got := k.Dialect(); got != want[k] {
			t.Errorf("%s.Dialect() = %q, want %q", k, got, want[k])
		}
		if err := testdb.Binaries(k); err != nil {
			t.Logf("Binaries(%s): %v", k, err)
		}
	}
	if testdb.Binaries("nope") == nil {
		t.Error("Binaries of an unknown kind: no error")
	}
}

func selectOne(t *testing.T, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) {
	t.Helper()
	var one int
	if err := q.QueryRowContext(ctx(t), "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 = %d, %v", one, err)
	}
}

// lock takes and releases a lock the way the library does: a transaction
// advisory lock on PostgreSQL, GET_LOCK/RELEASE_LOCK on one connection on
// MariaDB.
func lock(t *testing.T, k testdb.Kind, db *sql.DB, name string, key int64) {
	t.Helper()
	c := ctx(t)
	if k.Dialect() == "postgres" {
		tx, err := db.BeginTx(c, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(c, "SELECT pg_advisory_xact_lock($1)", key); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		return
	}
	conn, err := db.Conn(c)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var got sql.NullInt64
	if err := conn.QueryRowContext(c, "SELECT GET_LOCK(?, 5)", name).Scan(&got); err != nil || got.Int64 != 1 {
		t.Fatalf("GET_LOCK = %v, %v", got, err)
	}
	if err := conn.QueryRowContext(c, "SELECT RELEASE_LOCK(?)", name).Scan(&got); err != nil || got.Int64 != 1 {
		t.Fatalf("RELEASE_LOCK = %v, %v", got, err)
	}
}

func TestShared(t *testing.T) {
	for i, k := range testdb.Kinds() {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			db := testdb.Open(t, k)
			selectOne(t, db)
			selectOne(t, testdb.AdminDB(t, k))
			if a1, a2 := testdb.AdminDB(t, k), testdb.AdminDB(t, k); a1 != a2 {
				t.Error("AdminDB is not shared")
			}
			if d1, d2 := testdb.DSN(t, k), testdb.DSN(t, k); d1 != d2 {
				t.Error("DSN changes")
			}
			lock(t, k, db, fmt.Sprintf("testdb-shared-%d", i), int64(1000+i))
			testdb.AssertNoLeaks(t, k, db)
		})
	}
}

// TestLeaksDetected holds a lock (and thus a connection) and checks that
// Leaks reports both, then that they are gone after the release.
func TestLeaksDetected(t *testing.T) {
	for i, k := range testdb.Kinds() {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			db := testdb.Open(t, k)
			c := ctx(t)
			name := fmt.Sprintf("testdb-leak-%d", i)
			key := int64(-7_000_000_000 - int64(i)) // both halves non-trivial
			var release func()
			var want string
			if k.Dialect() == "postgres" {
				tx, err := db.BeginTx(c, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.ExecContext(c, "SELECT pg_advisory_xact_lock($1)", key); err != nil {
					t.Fatal(err)
				}
				release = func() { tx.Rollback() }
				want = fmt.Sprintf("key=%d", key)
			} else {
				conn, err := db.Conn(c)
				if err != nil {
					t.Fatal(err)
				}
				var got int
				if err := conn.QueryRowContext(c, "SELECT GET_LOCK(?, 5)", name).Scan(&got); err != nil || got != 1 {
					t.Fatalf("GET_LOCK = %v, %v", got, err)
				}
				release = func() {
					if err := testdb.RawRelease(c, conn, name); err != nil {
						t.Error(err)
					}
					conn.Close()
				}
				want = name
			}
			err := testdb.Leaks(k, db)
			if err == nil {
				release()
				t.Fatal("Leaks: nil while a lock is held")
			}
			msg := err.Error()
			for _, w := range []string{want, "1 connection(s) in use"} {
				if !strings.Contains(msg, w) {
					t.Errorf("Leaks error lacks %q:\n%s", w, msg)
				}
			}
			t.Logf("Leaks while holding:\n%s", msg)
			if k == testdb.Postgres {
				// The assertion itself fails (after its 5s of polling).
				ft := &fakeTB{TB: t}
				testdb.AssertNoLeaks(ft, k, db)
				if !strings.Contains(ft.errors(), want) {
					t.Errorf("AssertNoLeaks did not report the held lock; errors: %q", ft.errors())
				}
			}
			release()
			testdb.AssertNoLeaks(t, k, db)
		})
	}
}

// fakeTB records Errorf instead of failing the test.
type fakeTB struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}
func (f *fakeTB) errors() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.errs, "\n")
}

// TestPgBouncerTransactionMode checks that the PgBouncer DSN really reaches a
// PgBouncer in transaction mode, through its admin console.
func TestPgBouncerTransactionMode(t *testing.T) {
	if os.Getenv("ORMLOCK_TEST_PGBOUNCER_DSN") != "" {
		t.Skip("external PgBouncer")
	}
	dsn := testdb.DSN(t, testdb.PgBouncer)
	if !strings.Contains(dsn, "default_query_exec_mode=simple_protocol") {
		t.Errorf("PgBouncer DSN lacks simple protocol: %s", dsn)
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DefaultQueryExecMode != pgx.QueryExecModeSimpleProtocol {
		t.Errorf("DefaultQueryExecMode = %v", cfg.DefaultQueryExecMode)
	}
	cfg.Database = "pgbouncer" // the admin console
	c := ctx(t)
	conn, err := pgx.ConnectConfig(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(c, "SHOW CONFIG")
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for rows.Next() {
		v, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		settings[fmt.Sprint(v[0])] = fmt.Sprint(v[1])
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if settings["pool_mode"] != "transaction" {
		t.Errorf("pool_mode = %q, want transaction", settings["pool_mode"])
	}
	// The client connection of a pool shows up in SHOW CLIENTS.
	db := testdb.Open(t, testdb.PgBouncer)
	selectOne(t, db)
	var n int
	rows, err = conn.Query(c, "SHOW CLIENTS")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		v, _ := rows.Values()
		for i, f := range rows.FieldDescriptions() {
			if f.Name == "database" && fmt.Sprint(v[i]) == "ormlock" {
				n++
			}
		}
	}
	if n == 0 {
		t.Error("SHOW CLIENTS lists no client of database ormlock")
	}
}

// TestLogPath checks that SQL errors land in the server log.
func TestLogPath(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			path := testdb.LogPath(t, k)
			if path == "" {
				t.Skip("external server")
			}
			db := testdb.Open(t, k)
			c := ctx(t)
			table := "testdb_dup_" + string(k)
			for _, q := range []string{"DROP TABLE IF EXISTS " + table, "CREATE TABLE " + table + " (id int PRIMARY KEY)", "INSERT INTO " + table + " VALUES (1)"} {
				if _, err := db.ExecContext(c, q); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := db.ExecContext(c, "INSERT INTO "+table+" VALUES (1)"); err == nil {
				t.Fatal("duplicate insert succeeded")
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(string(b), "duplicate key") && strings.Contains(string(b), table) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no duplicate key error for %s in %s", table, path)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// TestRestart checks Start, Restart and Stop of private servers: a connection
// made before a restart fails after it, a new one works.
func TestRestart(t *testing.T) {
	for _, k := range testdb.Kinds() {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			s := testdb.Start(t, k)
			if s.Kind() != k || s.Port() == 0 || s.LogPath() == "" {
				t.Errorf("Kind %s Port %d LogPath %q", s.Kind(), s.Port(), s.LogPath())
			}
			if (s.Backend() != nil) != (k == testdb.PgBouncer) {
				t.Errorf("Backend() = %v", s.Backend())
			}
			driver := map[string]string{"postgres": "pgx", "mysql": "mysql"}[k.Dialect()]
			db, err := sql.Open(driver, s.DSN())
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			admin, err := sql.Open(driver, s.AdminDSN())
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			selectOne(t, admin)

			c := ctx(t)
			conn, err := db.Conn(c)
			if err != nil {
				t.Fatal(err)
			}
			selectOne(t, conn)
			port := s.Port()
			s.Restart(t)
			if s.Port() != port {
				t.Errorf("port changed on restart: %d -> %d", port, s.Port())
			}
			var one int
			if err := conn.QueryRowContext(c, "SELECT 1").Scan(&one); err == nil {
				t.Error("a connection made before the restart still works")
			}
			conn.Close()
			selectOne(t, db) // a new connection
			lock(t, k, db, "testdb-restart", 77)
			s.AssertNoLeaks(t, db)

			if b := s.Backend(); b != nil {
				b.Restart(t)
				// PgBouncer drops the server connections that PostgreSQL
				// closed; new transactions get new ones.
				deadline := time.Now().Add(10 * time.Second)
				for {
					err := db.QueryRowContext(c, "SELECT 1").Scan(&one)
					if err == nil {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("through PgBouncer after backend restart: %v", err)
					}
					t.Logf("through PgBouncer after backend restart: %v", err)
					time.Sleep(100 * time.Millisecond)
				}
			}

			s.Stop(t)
			db.SetMaxIdleConns(0)
			if err := db.PingContext(c); err == nil {
				t.Error("Ping works while stopped")
			}
			s.Restart(t)
			selectOne(t, db)
			if err := s.Close(); err != nil {
				t.Error(err)
			}
			if _, err := os.Stat(s.LogPath()); !os.IsNotExist(err) {
				t.Errorf("temp dir not removed: %v", err)
			}
		})
	}
}

// TestPgBouncerRevived checks that a private PgBouncer that dies (as 1.18
// does on a FATAL of its own) is started again on its port, while one
// stopped on purpose stays stopped.
func TestPgBouncerRevived(t *testing.T) {
	s := testdb.Start(t, testdb.PgBouncer)
	db, err := sql.Open("pgx", s.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	selectOne(t, db)
	pid, port := s.PID(), s.Port()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for s.PID() == pid || s.PID() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("PgBouncer not started again after it died")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s.Port() != port {
		t.Errorf("port changed: %d -> %d", port, s.Port())
	}
	db2, err := sql.Open("pgx", s.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	selectOne(t, db2)
	s.Stop(t)
	time.Sleep(300 * time.Millisecond)
	if s.PID() != 0 {
		t.Error("a PgBouncer stopped on purpose was started again")
	}
}
