package testdb_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/ormlock/ormlock/internal/testdb"
)

// A MariaDB protocol proxy records each command once, answered or not
// (a statement with a parameter: a prepare, an execute and an unanswered
// close), and RefuseQueries answers the queries it matches with an error
// the server never sees, on a connection that stays usable and keeps its
// session (a named lock it holds stays held), until it is stopped.
func TestProxyCommandsAndRefuseQueries(t *testing.T) {
	k := testdb.MariaDB
	px, dsn := testdb.ProxyDSN(t, k)
	db, err := sql.Open(k.Driver(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c := context.Background()
	conn, err := db.Conn(c)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	px.ResetCommands()
	var n int
	if err := conn.QueryRowContext(c, "SELECT 1").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRowContext(c, "SELECT ?", 2).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if err := conn.PingContext(c); err != nil {
		t.Fatal(err)
	}
	cmds := px.Commands()
	names := make([]string, len(cmds))
	for i, cmd := range cmds {
		names[i] = cmd.Name
	}
	// the Close may reach the proxy after the Ping: order is not asserted for it
	if got := strings.Join(names, " "); got != "Query Prepare Execute Close Ping" && got != "Query Prepare Execute Ping Close" {
		t.Errorf("commands %q, want Query Prepare Execute Close Ping", cmds)
	}
	if rt := testdb.RoundTrips(cmds); rt != 4 {
		t.Errorf("%d round trips, want 4 (the close is not answered): %q", rt, cmds)
	}
	if err := conn.QueryRowContext(c, "SELECT GET_LOCK('testdb-refuse', 0)").Scan(&n); err != nil || n != 1 {
		t.Fatalf("GET_LOCK: %d, %v", n, err)
	}
	px.RefuseQueries(func(q string) bool { return strings.Contains(q, "RELEASE_LOCK") }, 1105)
	err = conn.QueryRowContext(c, "SELECT RELEASE_LOCK('testdb-refuse')").Scan(&n)
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1105 {
		t.Fatalf("refused query: %v, want the proxy's error 1105", err)
	}
	var held sql.NullInt64
	if err := conn.QueryRowContext(c, "SELECT IS_USED_LOCK('testdb-refuse') = CONNECTION_ID()").Scan(&held); err != nil || held.Int64 != 1 {
		t.Fatalf("after the refused release: held %v, %v; want the lock still this connection's", held, err)
	}
	px.RefuseQueries(nil, 0)
	if err := conn.QueryRowContext(c, "SELECT RELEASE_LOCK('testdb-refuse')").Scan(&n); err != nil || n != 1 {
		t.Fatalf("release once refusing stopped: %d, %v", n, err)
	}
}
