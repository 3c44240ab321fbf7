package main

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// The example runs in CI in a short mode, on its embedded default and on
// the real servers of internal/testdb, with both ORMs.
func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }

const testSlots = 4

// runExample runs the program with args and asserts the summary line: one
// run per slot, no duplicate, every other firing skipped.
func runExample(t *testing.T, args ...string) string {
	t.Helper()
	args = append([]string{"-slots", fmt.Sprint(testSlots), "-period", "1s",
		"-job", "crondedup-test-" + strings.ReplaceAll(t.Name(), "/", "-") + "-" + time.Now().UTC().Format("150405.000")}, args...)
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	err := run(ctx, args, &stdout, &stderr)
	t.Logf("crondedup %s (%v):\n%s%s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), stdout.String(), stderr.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	want := fmt.Sprintf("%d slots, %d runs, 0 duplicates, %d skips", testSlots, testSlots, 2*testSlots)
	if got := lines[len(lines)-1]; got != want {
		t.Fatalf("summary %q, want %q", got, want)
	}
	slotLine := regexp.MustCompile(`^slot \d\d:\d\d:\d\d  ran: replica-[abc] \([+-]\d\.\d\ds\)  skipped: `)
	n := 0
	for _, l := range lines {
		if slotLine.MatchString(l) {
			n++
		}
	}
	if n != testSlots {
		t.Fatalf("%d slot lines, want %d", n, testSlots)
	}
	return stdout.String()
}

func TestCrondedup(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		// one after the other: go-mysql-server's start-up is not safe for
		// two engines starting at once in one process (a data race -race
		// reports)
		t.Run("gorm", func(t *testing.T) { runExample(t) })
		t.Run("ent", func(t *testing.T) { runExample(t, "-orm", "ent") })
	})
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer, testdb.MariaDB} {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			// the DSN a user writes: no pgx setting for a pooler (the demo
			// adds simple_protocol itself, as the command does)
			dsn := strings.Replace(testdb.DSN(t, k), "&default_query_exec_mode=simple_protocol", "", 1)
			t.Cleanup(func() { testdb.AssertNoLeaks(t, k) })
			t.Run("gorm", func(t *testing.T) { t.Parallel(); runExample(t, "-dsn", dsn) })
			t.Run("ent", func(t *testing.T) { t.Parallel(); runExample(t, "-dsn", dsn, "-orm", "ent") })
		})
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-slots", "0"},
		{"-period", "1500ms"},
		{"-period", "7h"},
		{"-orm", "sqlx"},
		{"-work", "2s"},
		{"-replicas", "0"},
		{"extra"},
	} {
		var out bytes.Buffer
		err := run(context.Background(), args, &out, &out)
		if err == nil {
			t.Errorf("%v: no error", args)
			continue
		}
		t.Logf("%v: %v", args, err)
	}
}

// What RunOnce needs of the embedded engine, checked directly against it
// (the behaviour of MySQL 8 / MariaDB 10.11 that the library relies on).
func TestEmbeddedEngine(t *testing.T) {
	e, err := startEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	open := func() *sql.DB {
		db, err := sql.Open("mysql", e.DSN())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	p1, p2 := open(), open()
	conn := func(db *sql.DB) *sql.Conn {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c1, c2 := conn(p1), conn(p2)
	val := func(c *sql.Conn, q string, args ...any) sql.NullInt64 {
		t.Helper()
		var v sql.NullInt64
		if err := c.QueryRowContext(ctx, q, args...).Scan(&v); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return v
	}
	is := func(what string, got sql.NullInt64, want int64) {
		t.Helper()
		if !got.Valid || got.Int64 != want {
			t.Fatalf("%s = %v, want %d", what, got, want)
		}
	}

	// GET_LOCK: exclusive across connections, with a timeout
	is("GET_LOCK on c1", val(c1, "SELECT GET_LOCK(?, 0)", "k"), 1)
	is("GET_LOCK on c2 while c1 holds", val(c2, "SELECT GET_LOCK(?, 0)", "k"), 0)
	start := time.Now()
	is("GET_LOCK(k, 0.3) on c2", val(c2, "SELECT GET_LOCK(?, ?)", "k", 0.3), 0)
	t.Logf("GET_LOCK with a 0.3 s timeout gave up after %v", time.Since(start))
	is("IS_USED_LOCK = CONNECTION_ID() on c1", val(c1, "SELECT IS_USED_LOCK(?) = CONNECTION_ID()", "k"), 1)
	is("IS_USED_LOCK = CONNECTION_ID() on c2", val(c2, "SELECT IS_USED_LOCK(?) = CONNECTION_ID()", "k"), 0)
	is("RELEASE_LOCK on c2 (not the holder)", val(c2, "SELECT RELEASE_LOCK(?)", "k"), 0)
	// a waiter gets the lock when the holder releases it
	got := make(chan sql.NullInt64, 1)
	go func() {
		var v sql.NullInt64
		_ = c2.QueryRowContext(ctx, "SELECT GET_LOCK(?, 5)", "k").Scan(&v)
		got <- v
	}()
	time.Sleep(100 * time.Millisecond)
	is("RELEASE_LOCK on c1", val(c1, "SELECT RELEASE_LOCK(?)", "k"), 1)
	is("GET_LOCK(k, 5) waiting on c2", <-got, 1)
	is("RELEASE_LOCK on c2", val(c2, "SELECT RELEASE_LOCK(?)", "k"), 1)
	// Difference from MySQL: releasing a lock nobody holds gives 0, not
	// NULL. ormlock treats both as "not held".
	if v := val(c1, "SELECT RELEASE_LOCK(?)", "k"); v.Valid && v.Int64 != 0 {
		t.Fatalf("RELEASE_LOCK of a free lock = %v", v)
	}
	// a connection that goes away frees its locks
	is("GET_LOCK on c1", val(c1, "SELECT GET_LOCK(?, 0)", "gone"), 1)
	_ = c1.Raw(func(any) error { return driver.ErrBadConn })
	_ = c1.Close()
	is("GET_LOCK after the holder's connection closed", val(c2, "SELECT GET_LOCK(?, 2)", "gone"), 1)
	is("RELEASE_LOCK", val(c2, "SELECT RELEASE_LOCK(?)", "gone"), 1)

	// transactions: isolation and rollback
	if _, err := p1.ExecContext(ctx, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10), n INT NOT NULL DEFAULT 0)"); err != nil {
		t.Fatal(err)
	}
	count := func() int64 { return val(c2, "SELECT COUNT(*) FROM t").Int64 }
	tx, err := p1.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO t (id, v) VALUES (1, 'a')"); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Fatalf("another connection sees an uncommitted row (%d)", n)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d rows after ROLLBACK", n)
	}

	// INSERT ... ON DUPLICATE KEY UPDATE: RowsAffected 1 / 2 / 0, and the
	// assignments evaluated left to right (a later one sees an earlier
	// one's new value, as in MySQL).
	upsert := "INSERT INTO t (id, v) VALUES (1, ?) ON DUPLICATE KEY UPDATE n = IF(v = 'done', n, n + 1), v = IF(v = 'done', v, VALUES(v))"
	affected := func(v string) int64 {
		res, err := p1.ExecContext(ctx, upsert, v)
		if err != nil {
			t.Fatal(err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := affected("a"); n != 1 {
		t.Fatalf("insert: RowsAffected %d, want 1", n)
	}
	if n := affected("done"); n != 2 {
		t.Fatalf("update: RowsAffected %d, want 2", n)
	}
	if n := affected("b"); n != 0 {
		t.Fatalf("no change: RowsAffected %d, want 0", n)
	}
	var v string
	var n int
	if err := p1.QueryRowContext(ctx, "SELECT v, n FROM t WHERE id = 1").Scan(&v, &n); err != nil || v != "done" || n != 1 {
		t.Fatalf("row = (%q, %d), %v; want (done, 1)", v, n, err)
	}

	// and the library on it: RunOnce in both modes, Session excluding
	// Transaction
	gdb := func(db *sql.DB) *gorm.DB {
		g, err := gorm.Open(gormmysql.New(gormmysql.Config{Conn: db}), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	g1, g2 := gdb(p1), gdb(p2)
	if err := gormlock.Migrate(g1); err != nil {
		t.Fatal(err)
	}
	slot := time.Date(2031, 5, 6, 0, 0, 0, 0, time.UTC)
	for _, opts := range [][]ormlock.Option{nil, {ormlock.WithClaim()}} {
		job := fmt.Sprintf("embedded-%d", len(opts))
		if err := gormlock.RunOnce(g1, job, slot, func(*gorm.DB) error { return nil }, opts...); err != nil {
			t.Fatalf("RunOnce %v: %v", opts, err)
		}
		if err := gormlock.RunOnce(g2, job, slot, func(*gorm.DB) error { return nil }, opts...); !errors.Is(err, ormlock.ErrAlreadyDone) {
			t.Fatalf("second RunOnce %v: %v, want ErrAlreadyDone", opts, err)
		}
	}
	err = gormlock.Session(g1, "embedded-session", func(context.Context) error {
		return gormlock.Transaction(g2, "embedded-session", func(*gorm.DB) error { return nil })
	})
	if !errors.Is(err, ormlock.ErrNotAcquired) {
		t.Fatalf("Transaction while a Session holds the lock: %v, want ErrNotAcquired", err)
	}

	// nothing leaked: no named lock held, no connection in use
	for _, name := range []string{"k", "gone", "embedded-session"} {
		if v := val(c2, "SELECT IS_USED_LOCK(?)", name); v.Valid {
			t.Errorf("lock %q still held by connection %d", name, v.Int64)
		}
	}
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	for i, db := range []*sql.DB{p1, p2} {
		if n := db.Stats().InUse; n != 0 {
			t.Errorf("pool %d: %d connections in use", i+1, n)
		}
	}
}
