package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// TestMySQLRoundTrips counts, on MariaDB with the driver's default DSN (no
// interpolateParams, no multiStatements), the commands each call sends
// through a protocol proxy (testdb.Proxy.Commands; a round trip is an
// answered command) on a warm one-connection pool, for every adapter
// that runs on MySQL/MariaDB: a Transaction costs GET_LOCK, BEGIN, COMMIT
// and RELEASE_LOCK, each one COM_QUERY (4; 5 with an isolation level,
// whose SET TRANSACTION is a statement of its own), a loser 1; All of 3
// tried once one GET_LOCK statement and one RELEASE_LOCK statement (4; a
// loser 2: the try, and the release of the names it took); Session's
// set-up 2 (wait_timeout read, GET_LOCK) and its release 1. No lock
// statement is prepared. The hand-written protocol with bound parameters
// (a prepare and an execute per statement) is counted beside them.
func TestMySQLRoundTrips(t *testing.T) {
	forMySQLProxied(t, func(t *testing.T, k testdb.Kind, px *testdb.Proxy, db *sql.DB, r runner) {
		ctx := context.Background()
		name := "rt-" + t.Name()
		all := ormlock.All(ormlock.Name(name+"-a"), ormlock.Name(name+"-b"), ormlock.Name(name+"-c"))
		noop := func(txn) error { return nil }
		// the pool's connection opened, and the server checked (once per
		// pool: SHOW GLOBAL VARIABLES, one round trip more on a pool's first lock)
		if err := r.Transaction(ctx, name+"-warm", noop); err != nil {
			t.Fatal(err)
		}
		counts := map[string][]testdb.Command{}
		count := func(c string, f func() error) {
			t.Helper()
			// drain: a COM_STMT_CLOSE (the driver's, after a statement
			// it prepared: the hand-written protocol's) is not
			// answered, so the call that sent it returns before the
			// proxy may have read it, and it would be counted with the
			// next call; the proxy reads one connection's commands in
			// order, so once a ping on the pool's one connection is
			// answered, every command sent before it is recorded
			if err := db.PingContext(ctx); err != nil {
				t.Fatal(err)
			}
			px.ResetCommands()
			if err := f(); err != nil {
				t.Fatalf("%s: %v", c, err)
			}
			counts[c] = px.Commands()
		}
		loses := func(err error) error {
			if !errors.Is(err, ormlock.ErrNotAcquired) {
				return fmt.Errorf("want ErrNotAcquired, got %v", err)
			}
			return nil
		}
		count("Transaction", func() error { return r.Transaction(ctx, name, noop) })
		count("Transaction (READ COMMITTED)", func() error {
			return r.Transaction(ctx, name, noop, ormlock.WithTxOptions(&sql.TxOptions{Isolation: sql.LevelReadCommitted}))
		})
		count("Transaction (wait)", func() error { return r.Transaction(ctx, name, noop, ormlock.WithWait(time.Second)) })
		count("All of 3", func() error { return r.Transaction(ctx, all, noop) })
		count("All of 3 (wait)", func() error { return r.Transaction(ctx, all, noop, ormlock.WithWait(time.Second)) })
		count("Session", func() error { return r.Session(ctx, name, func(context.Context) error { return nil }) })
		count("ORM transaction, no lock", func() error { return r.PlainTx(ctx) })
		count("hand-written, bound parameters", func() error { return testdb.Handwritten(ctx, k, db, name) })
		release := testdb.RawHold(t, k, "", name)
		count("Transaction, loser", func() error { return loses(r.Transaction(ctx, name, noop)) })
		count("Transaction (wait), loser", func() error {
			return loses(r.Transaction(ctx, name, noop, ormlock.WithWait(20*time.Millisecond)))
		})
		count("Session, loser", func() error {
			return loses(r.Session(ctx, name, func(context.Context) error { return nil }))
		})
		release()
		release = testdb.RawHold(t, k, "", name+"-b")
		count("All of 3, loser", func() error { return loses(r.Transaction(ctx, all, noop)) })
		release()
		want := map[string]int{
			"Transaction":                    4,
			"Transaction (READ COMMITTED)":   5,
			"Transaction (wait)":             4,
			"All of 3":                       4,
			"All of 3 (wait)":                6,
			"Session":                        3,
			"ORM transaction, no lock":       2,
			"hand-written, bound parameters": 6,
			"Transaction, loser":             1,
			"Transaction (wait), loser":      1,
			"Session, loser":                 2,
			"All of 3, loser":                2,
		}
		for c, cmds := range counts {
			n := testdb.RoundTrips(cmds)
			t.Logf("%s: %d round trips: %q", c, n, cmds)
			if n != want[c] {
				t.Errorf("%s: %d round trips, want %d: %q", c, n, want[c], cmds)
			}
			if c == "hand-written, bound parameters" {
				continue
			}
			for _, cmd := range cmds {
				if cmd.Name != "Query" {
					t.Errorf("%s: a %s command (want text statements only): %q", c, cmd.Name, cmds)
					break
				}
			}
		}
	})
}

// When the one statement that tries every key of an All fails, which keys
// it took is unknown: the connection is destroyed (the server frees what
// it held), never handed back to the pool, even when the error is one that
// means "not taken" for a single GET_LOCK (1969, max_statement_time).
// The failure is made by a proxy that answers the statement with that
// error on a connection that stays alive (testdb.Proxy.RefuseQueries).
func TestMySQLAllTryFailureDestroysConnection(t *testing.T) {
	forMySQLProxied(t, func(t *testing.T, k testdb.Kind, px *testdb.Proxy, db *sql.DB, r runner) {
		ctx := context.Background()
		name := "alltry-" + t.Name()
		all := ormlock.All(ormlock.Name(name+"-a"), ormlock.Name(name+"-b"), ormlock.Name(name+"-c"))
		noop := func(txn) error { return nil }
		if err := r.Transaction(ctx, all, noop); err != nil { // warm: the pool's connection, the server check
			t.Fatal(err)
		}
		px.ResetCommands()
		px.RefuseQueries(func(q string) bool { return strings.Count(q, "GET_LOCK(") == 3 }, 1969)
		called := false
		err := r.Transaction(ctx, all, func(txn) error { called = true; return nil })
		px.RefuseQueries(nil, 0)
		if err == nil || called || errors.Is(err, ormlock.ErrNotAcquired) {
			t.Fatalf("a failed try of the set: %v (fn called: %v), want an error that is not ErrNotAcquired and fn not called", err, called)
		}
		t.Logf("the set's try failed: %v", err)
		if err := r.Transaction(ctx, all, noop); err != nil {
			t.Fatal(err)
		}
		cmds := px.Commands()
		first, last := cmds[0], cmds[len(cmds)-1]
		if first.Conn == last.Conn {
			t.Errorf("the connection whose set's try failed (%d) was used again: %q", first.Conn, cmds)
		}
		for _, key := range []string{name + "-a", name + "-b", name + "-c"} {
			if !free(t, k, key) {
				t.Errorf("%s held after the calls", key)
			}
		}
	})
}

// forMySQLProxied runs f for every adapter of MySQL/MariaDB (pgxlock is
// PostgreSQL's only) on a pool of one connection through a proxy that
// records the client's commands (testdb.ProxyDSN), checked for leaks at
// the end.
func forMySQLProxied(t *testing.T, f func(t *testing.T, k testdb.Kind, px *testdb.Proxy, db *sql.DB, r runner)) {
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
			db.SetMaxOpenConns(1)
			db.SetMaxIdleConns(1)
			t.Cleanup(func() { db.Close() })
			t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
			r := a.on(t, k.Dialect(), db)
			f(t, k, px, db, r)
		})
	}
}
