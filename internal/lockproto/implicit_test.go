package lockproto_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

// noQuerier fails every statement: a check that uses it paid a round trip.
type noQuerier struct{}

func (noQuerier) ExecContext(context.Context, string, ...any) (sql.Result, error) {
	return nil, errors.New("a round trip")
}

func (noQuerier) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	c, cancel := context.WithCancel(ctx)
	cancel()
	return (&sql.DB{}).QueryRowContext(c, q, args...)
}

// With go-sql-driver/mysql the implicit-commit check reads the status
// flags of the last reply: no round trip, and it sees a DDL statement's
// implicit commit.
func TestMySQLInTxNoRoundTrip(t *testing.T) {
	k := testdb.MariaDB
	ctx := context.Background()
	db := testdb.Open(t, k)
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec("SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if in, err := lockproto.MySQLInTx(ctx, conn, noQuerier{}); err != nil || !in {
		t.Fatalf("in an open transaction: %v, %v; want true without a round trip", in, err)
	}
	tbl := testdb.Table(t, k, "ddl")
	if _, err := tx.Exec("CREATE TABLE " + tbl + " (id int)"); err != nil {
		t.Fatal(err)
	}
	if in, err := lockproto.MySQLInTx(ctx, conn, noQuerier{}); err != nil || in {
		t.Fatalf("after a DDL statement: %v, %v; want false without a round trip", in, err)
	}
	if in, err := lockproto.MySQLInTx(ctx, nil, tx); err != nil || in {
		t.Fatalf("@@in_transaction after a DDL statement: %v, %v; want false", in, err)
	}
}
