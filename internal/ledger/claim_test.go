package ledger

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }

// A claim-mode claim whose INSERT reached the server but whose answer was
// lost (or, on MySQL, whose read-back the caller's context cut short) must
// not leave a 'running' row that nobody runs: the call fails, the row is
// marked failed, the lock is released, and the next call runs the slot.
func TestClaimAnswerLost(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		tbl, admin := testTable(t, k, "claimlost")
		d, table := tbl.d, tbl.name
		job, slot := "claimlost", testdb.Slot(1)
		run := func(db *sql.DB, fn func(context.Context) error) error {
			cfg := config.New(ormlock.WithLedgerTable(table), ormlock.WithOwner("replica-a"), ormlock.WithClaim())
			op, err := lockproto.NewOp(d, "ledger test", ormlock.RunKey(job, slot), cfg)
			if err != nil {
				t.Fatal(err)
			}
			r, err := NewRun("ledger test", op, job, slot)
			if err != nil {
				t.Fatal(err)
			}
			return r.Claimed(ctx, db, fn)
		}

		lossy := lostAnswerDB(t, k, "INSERT INTO")
		ran := false
		err := run(lossy, func(context.Context) error { ran = true; return nil })
		if err == nil || !strings.Contains(err.Error(), errAnswerLost.Error()) || ran {
			t.Fatalf("Claimed with the claim's answer lost: %v (fn ran: %v), want the lost answer and fn not run", err, ran)
		}
		runs, err := tbl.Runs(ctx, admin, "", job, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) != 1 || runs[0].Status != StatusFailed || !strings.Contains(runs[0].Error, "the claim failed") {
			t.Fatalf("ledger after the lost answer: %+v, want one failed row", runs)
		}
		testdb.AssertNoLeaks(t, k, lossy)

		if err := run(admin, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
			t.Fatalf("the next call: %v (fn ran: %v)", err, ran)
		}
		if runs, _ := tbl.Runs(ctx, admin, "", job, 10); len(runs) != 1 || runs[0].Status != StatusDone {
			t.Fatalf("ledger after the next call: %+v, want one done row", runs)
		}
		testdb.AssertNoLeaks(t, k, admin)
	})
}

var errAnswerLost = errors.New("connection reset: the answer was lost")

// lostAnswerDB opens a pool on k's server whose connections run every
// statement on the server but answer errAnswerLost, once, to the first one
// that starts with prefix: the statement took effect, its caller cannot
// know.
func lostAnswerDB(t *testing.T, k testdb.Kind, prefix string) *sql.DB {
	t.Helper()
	return wrappedDB(t, k, &lossy{prefix: prefix})
}

// wrappedDB opens a pool on k's server whose connections go through l
// (l.Connector is set here).
func wrappedDB(t *testing.T, k testdb.Kind, l *lossy) *sql.DB {
	t.Helper()
	base, err := sql.Open(k.Driver(), testdb.DSN(t, k))
	if err != nil {
		t.Fatal(err)
	}
	dc, ok := base.Driver().(driver.DriverContext)
	if !ok {
		t.Fatalf("%s: the driver has no connector", k.Driver())
	}
	_ = base.Close()
	c, err := dc.OpenConnector(testdb.DSN(t, k))
	if err != nil {
		t.Fatal(err)
	}
	l.Connector = c
	db := sql.OpenDB(l)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

type lossy struct {
	driver.Connector
	prefix string // "" loses nothing
	lost   atomic.Bool
	// seen, when set, is called with every statement run and its
	// arguments (the plan test records the ledger's statements with it).
	seen func(query string, args []driver.NamedValue)
}

func (l *lossy) saw(query string, args []driver.NamedValue) {
	if l.seen != nil {
		l.seen(query, args)
	}
}

func (l *lossy) Connect(ctx context.Context) (driver.Conn, error) {
	c, err := l.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &lossyConn{Conn: c, l: l}, nil
}

// lose reports whether query's answer is the one to lose.
func (l *lossy) lose(query string) bool {
	return l.prefix != "" && strings.HasPrefix(strings.TrimSpace(query), l.prefix) && l.lost.CompareAndSwap(false, true)
}

// lossyConn forwards to the driver's connection, which implements the
// context interfaces (pgx and go-sql-driver/mysql both do).
type lossyConn struct {
	driver.Conn
	l *lossy
}

func (c *lossyConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.l.saw(query, args)
	res, err := c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
	if err == nil && c.l.lose(query) {
		return nil, errAnswerLost
	}
	return res, err
}

func (c *lossyConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.l.saw(query, args)
	rows, err := c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
	if err == nil && c.l.lose(query) {
		dest := make([]driver.Value, len(rows.Columns()))
		for rows.Next(dest) == nil {
		}
		_ = rows.Close()
		return nil, errAnswerLost
	}
	return rows, err
}

func (c *lossyConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *lossyConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	st, err := c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &lossyStmt{Stmt: st, l: c.l, query: query}, nil
}

// lossyStmt is a prepared statement (go-sql-driver/mysql prepares every
// statement with arguments unless interpolateParams is set).
type lossyStmt struct {
	driver.Stmt
	l     *lossy
	query string
}

func (s *lossyStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.l.saw(s.query, args)
	res, err := s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
	if err == nil && s.l.lose(s.query) {
		return nil, errAnswerLost
	}
	return res, err
}

func (s *lossyStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.l.saw(s.query, args)
	return s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
}

func (c *lossyConn) Ping(ctx context.Context) error { return c.Conn.(driver.Pinger).Ping(ctx) }

func (c *lossyConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *lossyConn) IsValid() bool {
	v, ok := c.Conn.(driver.Validator)
	return !ok || v.IsValid()
}

func (c *lossyConn) CheckNamedValue(nv *driver.NamedValue) error {
	if nc, ok := c.Conn.(driver.NamedValueChecker); ok {
		return nc.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}
