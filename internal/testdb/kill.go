package testdb

import (
	"database/sql"
	"fmt"
	"testing"
	"time"
)

// Kill ends the server connection id (a PostgreSQL backend pid or a
// MySQL/MariaDB connection id) on the shared server of kind k, as an
// operator or a failover would; see KillOn.
func Kill(tb testing.TB, k Kind, id int64) {
	tb.Helper()
	KillOn(tb, k.Dialect(), AdminDB(tb, k), id)
}

// KillOn ends the server connection id through admin: pg_terminate_backend on
// PostgreSQL (dialect "postgres"), KILL CONNECTION on MySQL/MariaDB. It fails
// the test when the server refuses.
func KillOn(tb testing.TB, dialect string, admin *sql.DB, id int64) {
	tb.Helper()
	var err error
	if dialect == "postgres" {
		var ok bool
		err = admin.QueryRow("SELECT pg_terminate_backend($1)", id).Scan(&ok)
		if err == nil && !ok {
			err = fmt.Errorf("pg_terminate_backend(%d) returned false", id)
		}
	} else {
		_, err = admin.Exec(fmt.Sprintf("KILL CONNECTION %d", id))
	}
	if err != nil {
		tb.Fatalf("kill connection %d: %v", id, err)
	}
}

// WaitGone waits up to 10s until the server connection id has ended, on the
// shared server of kind k; see WaitGoneOn.
func WaitGone(tb testing.TB, k Kind, id int64) {
	tb.Helper()
	WaitGoneOn(tb, k.Dialect(), AdminDB(tb, k), id)
}

// WaitGoneOn waits up to 10s until the server connection id is no longer
// listed (pg_stat_activity, information_schema.PROCESSLIST) through admin.
func WaitGoneOn(tb testing.TB, dialect string, admin *sql.DB, id int64) {
	tb.Helper()
	q := "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?"
	if dialect == "postgres" {
		q = "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = $1"
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := admin.QueryRow(q, id).Scan(&n); err != nil {
			tb.Fatalf("look for connection %d: %v", id, err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("connection %d still open after 10s", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
