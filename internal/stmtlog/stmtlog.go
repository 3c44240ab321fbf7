// Package stmtlog counts, for tests, the statements a pool sends to
// PostgreSQL, in the server's own log (log_statement = all): one line per
// simple-protocol message, and one per extended-protocol execute. It is how
// the tests and docs/BENCHMARKS.md count round trips.
package stmtlog

import (
	"bufio"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ormlock/ormlock/internal/testdb"
)

// Log reads PostgreSQL's statement log for the statements of one
// application_name.
type Log struct {
	k    testdb.Kind
	app  string
	path string
}

var stmtLogs atomic.Int64

// Start turns on log_statement = all on the shared server of k (and
// off after the test) and returns a reader for the statements of a pool
// opened with sl.Open.
func Start(t *testing.T, k testdb.Kind) *Log {
	t.Helper()
	admin := testdb.AdminDB(t, k)
	path := testdb.LogPath(t, k)
	if path == "" {
		t.Skip("a DSN override: the server's log is not readable here")
	}
	for _, q := range []string{"ALTER SYSTEM SET log_statement = 'all'", "SELECT pg_reload_conf()"} {
		if _, err := admin.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		_, _ = admin.Exec("ALTER SYSTEM RESET log_statement")
		_, _ = admin.Exec("SELECT pg_reload_conf()")
	})
	return &Log{k: k, app: fmt.Sprintf("ormlock_rt_%d_%d", os.Getpid(), stmtLogs.Add(1)), path: path}
}

// Open opens a one-connection pool whose statements the log names.
func (sl *Log) Open(t *testing.T) *sql.DB {
	t.Helper()
	dsn := testdb.DSN(t, sl.k)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	db, err := sql.Open("pgx", dsn+sep+"application_name="+sl.app)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	// the reload reaches a backend between statements: wait for it
	deadline := time.Now().Add(10 * time.Second)
	for {
		var v string
		if err := db.QueryRow("SHOW log_statement").Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v == "all" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("log_statement is %q", v)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return db
}

// OpenPool opens a pool of at most n connections whose statements the log
// names, as Open does one of one.
func (sl *Log) OpenPool(t *testing.T, n int) *sql.DB {
	t.Helper()
	db := sl.Open(t)
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	return db
}

// During runs f once and returns the statements the log's pools sent
// while it ran.
func (sl *Log) During(t *testing.T, f func()) []string {
	t.Helper()
	start := sl.mark(t)
	f()
	return sl.since(t, start, sl.mark(t))
}

// Count runs f twice (the first warms the driver's statement cache) and
// returns the statements the second one sent, as logged by the server,
// but the pgx driver's "-- ping": database/sql's pgx driver pings a
// connection that sat idle for more than a second before it hands it out
// (stdlib's ResetSession), whatever runs on it next — on a loaded machine
// the marker between the two runs can take that long — so it is the
// pool's, not the call's.
func (sl *Log) Count(t *testing.T, f func() error) []string {
	t.Helper()
	if err := f(); err != nil {
		t.Fatal(err)
	}
	start := sl.mark(t)
	if err := f(); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range sl.since(t, start, sl.mark(t)) {
		if s != "statement: -- ping" {
			out = append(out, s)
		}
	}
	return out
}

// since returns the statements of the log's pools between the markers
// start and end.
func (sl *Log) since(t *testing.T, start, end string) []string {
	t.Helper()
	var out []string
	in := false
	for _, l := range sl.lines(t) {
		switch {
		case strings.Contains(l, start):
			in = true
		case strings.Contains(l, end):
			return out
		case in && strings.Contains(l, " "+sl.app+": LOG:  ") &&
			(strings.Contains(l, "LOG:  statement: ") || strings.Contains(l, "LOG:  execute ")):
			out = append(out, l[strings.Index(l, "LOG:  ")+6:])
		}
	}
	t.Fatalf("marker %q not found in %s", end, sl.path)
	return nil
}

// ErrorsDuring runs f once and returns the errors the server logged for
// the statements of the log's pools while it ran (the text after
// "ERROR:  ").
func (sl *Log) ErrorsDuring(t *testing.T, f func()) []string {
	t.Helper()
	start := sl.mark(t)
	f()
	end := sl.mark(t)
	var out []string
	in := false
	for _, l := range sl.lines(t) {
		switch {
		case strings.Contains(l, start):
			in = true
		case strings.Contains(l, end):
			return out
		case in && strings.Contains(l, " "+sl.app+": ERROR:  "):
			out = append(out, l[strings.Index(l, "ERROR:  ")+8:])
		}
	}
	t.Fatalf("marker %q not found in %s", end, sl.path)
	return nil
}

var marks atomic.Int64

// mark logs a unique statement from another connection and waits until the
// log shows it: every statement sent before it is in the log by then.
func (sl *Log) mark(t *testing.T) string {
	t.Helper()
	m := fmt.Sprintf("ormlock-mark-%d-%d", os.Getpid(), marks.Add(1))
	// An idle backend applies a configuration reload only once its next
	// statement has run, so the first marker an admin connection sends
	// after Start's reload may run with log_statement still off: send it
	// again every 500 ms until the log shows it.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := testdb.AdminDB(t, sl.k).Exec("SELECT '" + m + "'"); err != nil {
			t.Fatal(err)
		}
		for again := time.Now().Add(500 * time.Millisecond); time.Now().Before(again); {
			for _, l := range sl.lines(t) {
				if strings.Contains(l, m) {
					return m
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Fatalf("marker %q never reached the log", m)
	return ""
}

func (sl *Log) lines(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(sl.path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}
