package lockproto_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

// MySQLErrno reads the number from the driver's own error type, however
// deeply wrapped, and nothing from texts that merely resemble it.
func TestMySQLErrno(t *testing.T) {
	withState := &mysql.MySQLError{Number: 1146, SQLState: [5]byte{'4', '2', 'S', '0', '2'}, Message: "Table 't' doesn't exist"}
	noState := &mysql.MySQLError{Number: 1969, Message: "Query execution was interrupted (max_statement_time exceeded)"}
	for _, c := range []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, 0},
		{"with SQLSTATE", withState, 1146},
		{"without SQLSTATE", noState, 1969},
		{"wrapped", fmt.Errorf("ormlock: ledger: %w", withState), 1146},
		{"wrapped twice", fmt.Errorf("a: %w", fmt.Errorf("b: %w", noState)), 1969},
		{"joined", errors.Join(errors.New("other"), fmt.Errorf("x: %w", withState)), 1146},
		{"multi %w", fmt.Errorf("%w; %w", errors.New("first"), noState), 1969},
		{"plain text", errors.New("Error in the pipes"), 0},
		{"number then words", errors.New("Error 1146 in the text only"), 0},
		{"bad SQLSTATE", errors.New("Error 1146 (42S0): x"), 0},
		{"number without colon", errors.New("Error 1146"), 0},
		{"wrapped text only", fmt.Errorf("ormlock: Error 1146: %s", "x"), 0},
	} {
		if got := lockproto.MySQLErrno(c.err); got != c.want {
			t.Errorf("%s: MySQLErrno(%v) = %d, want %d", c.name, c.err, got, c.want)
		}
	}
}

// A server's statement timeout is recognised on every dialect: PostgreSQL's
// query_canceled, MariaDB's max_statement_time, MySQL's max_execution_time;
// other errors are not.
func TestStatementTimeout(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "57014"}, true},
		{fmt.Errorf("x: %w", &pgconn.PgError{Code: "57014"}), true},
		{&pgconn.PgError{Code: "55P03"}, false},
		{&mysql.MySQLError{Number: 1969}, true},
		{fmt.Errorf("x: %w", &mysql.MySQLError{Number: 3024}), true},
		{&mysql.MySQLError{Number: 1205}, false},
		{errors.New("timeout"), false},
	} {
		if got := lockproto.StatementTimeout(c.err); got != c.want {
			t.Errorf("StatementTimeout(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

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

// askedTx is a transaction that records the statements sent through it.
type askedTx struct {
	lockproto.Tx
	asked []string
}

func (a *askedTx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	a.asked = append(a.asked, q)
	return a.Tx.QueryRowContext(ctx, q, args...)
}

// The ledger's check after a failed fn (Op.MySQLImplicitCommit) reads the
// status of the pinned connection of the Op's own transaction, as Commit
// and Rollback do: no @@in_transaction, which Oracle MySQL does not have.
func TestMySQLImplicitCommitReadsPinnedConn(t *testing.T) {
	k := testdb.MariaDB
	ctx := context.Background()
	db := testdb.Open(t, k)
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
	op, err := lockproto.NewOp(lockproto.MySQL, "RunOnce", keys.Name("implicit-"+t.Name()), config.New())
	if err != nil {
		t.Fatal(err)
	}
	lt, err := op.BeginLocked(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	spy := &askedTx{Tx: lt.Tx}
	lt.Tx = spy
	ended := false
	defer func() {
		if !ended {
			_ = lt.Rollback()
		}
	}()
	if _, err := spy.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if op.MySQLImplicitCommit(ctx, spy) {
		t.Fatal("an open transaction reported as committed implicitly")
	}
	tbl := testdb.Table(t, k, "ddl")
	if _, err := spy.ExecContext(ctx, "CREATE TABLE "+tbl+" (id int)"); err != nil {
		t.Fatal(err)
	}
	if !op.MySQLImplicitCommit(ctx, spy) {
		t.Fatal("a DDL statement's implicit commit not seen")
	}
	if len(spy.asked) != 0 {
		t.Fatalf("the check sent %q; want the pinned connection's status read, no statement", spy.asked)
	}
	ended = true
	if err := lt.Rollback(); !errors.Is(err, lockproto.ErrImplicitCommit) {
		t.Fatalf("Rollback after the implicit commit: %v, want ErrImplicitCommit", err)
	}
}
