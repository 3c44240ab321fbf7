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
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
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
			op, err := lockproto.NewOp(d, "ledger test", keys.RunKey(job, slot), cfg)
			if err != nil {
				t.Fatal(err)
			}
			r, err := NewRun("ledger test", op, job, slot, nil)
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

// The row-level edges of the ledger statements, on each server, without a
// lock around them (the verbs' tests cover the lock): a claim takes over a
// running or failed row but never a done one; a finish whose claim was taken
// over is ErrLockLost and writes nothing; abandon touches only its owner's
// running row; namespaces never meet.
func TestTableClaimEdges(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		tbl, db := testTable(t, k, "edges")
		job, slot := "edges", testdb.Slot(2)
		status := func(ns string) (string, string) {
			t.Helper()
			runs, err := tbl.Runs(ctx, db, ns, job, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(runs) != 1 {
				t.Fatalf("namespace %q: %d rows, want 1: %+v", ns, len(runs), runs)
			}
			return runs[0].Status, runs[0].Owner
		}
		claim := func(ns, owner string) (time.Time, bool) {
			t.Helper()
			started, ok, err := tbl.claim(ctx, db, ns, job, slot, owner, false)
			if err != nil {
				t.Fatalf("claim by %s: %v", owner, err)
			}
			return started, ok
		}

		startedA, ok := claim("", "a")
		if !ok {
			t.Fatal("the first claim was refused")
		}
		// A running row left by a (dead) owner is taken over: the lock, not
		// the row, tells a live run from a dead one.
		time.Sleep(2 * time.Millisecond) // a started_at of its own, even at the server's clock resolution
		startedB, ok := claim("", "b")
		if !ok {
			t.Fatal("a running row was not taken over")
		}
		if s, o := status(""); s != StatusRunning || o != "b" {
			t.Fatalf("after the takeover: %s by %s", s, o)
		}
		// a's finish finds its claim gone: ErrLockLost, and b's row untouched.
		if err := tbl.finish(ctx, db, "", job, slot, "a", startedA, StatusDone, ""); !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("finish of a claim taken over: %v, want ErrLockLost", err)
		}
		// abandon by another owner does nothing; b's own marks it failed.
		if err := tbl.abandon(ctx, db, "", job, slot, "a", "x"); err != nil {
			t.Fatal(err)
		}
		if s, _ := status(""); s != StatusRunning {
			t.Fatalf("abandon by another owner changed the row: %s", s)
		}
		if err := tbl.abandon(ctx, db, "", job, slot, "b", "interrupted"); err != nil {
			t.Fatal(err)
		}
		if s, o := status(""); s != StatusFailed || o != "b" {
			t.Fatalf("after b's abandon: %s by %s", s, o)
		}
		// b's finish after its abandon: the claim is no longer running.
		if err := tbl.finish(ctx, db, "", job, slot, "b", startedB, StatusDone, ""); !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("finish after abandon: %v, want ErrLockLost", err)
		}
		// A failed row is taken over, and once done it is never claimed again.
		startedC, ok := claim("", "c")
		if !ok {
			t.Fatal("a failed row was not taken over")
		}
		if err := tbl.finish(ctx, db, "", job, slot, "c", startedC, StatusDone, ""); err != nil {
			t.Fatal(err)
		}
		if _, ok := claim("", "d"); ok {
			t.Fatal("a done row was claimed")
		}
		if s, o := status(""); s != StatusDone || o != "c" {
			t.Fatalf("after the refused claim: %s by %s", s, o)
		}
		if err := tbl.abandon(ctx, db, "", job, slot, "c", "late"); err != nil {
			t.Fatal(err)
		}
		if s, _ := status(""); s != StatusDone {
			t.Fatalf("abandon changed a done row: %s", s)
		}
		// Another namespace: its own row, claimed afresh.
		if _, ok := claim("tenant-2", "c"); !ok {
			t.Fatal("the same job and slot in another namespace was refused")
		}
		if s, _ := status("tenant-2"); s != StatusRunning {
			t.Fatalf("namespace tenant-2: %s", s)
		}
		testdb.AssertNoLeaks(t, k, db)
	})
}

// testTable creates a ledger table of its own for the test on k's server,
// and returns it with a pool on that server.
func testTable(t *testing.T, k testdb.Kind, prefix string) (*Table, *sql.DB) {
	t.Helper()
	d := lockproto.Postgres
	if k == testdb.MariaDB {
		d = lockproto.MySQL
	}
	tbl, err := NewTable(d, testdb.Table(t, k, prefix))
	if err != nil {
		t.Fatal(err)
	}
	db := testdb.Open(t, k)
	if _, err := db.ExecContext(context.Background(), tbl.CreateSQL()); err != nil {
		t.Fatalf("create the ledger table: %v", err)
	}
	return tbl, db
}
