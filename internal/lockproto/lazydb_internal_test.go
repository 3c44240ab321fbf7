package lockproto

import (
	"context"
	"database/sql"
	"sync"
	"testing"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/testdb"
)

// countingDB is a LazyDB, less the querier that lazyCheckDB adds, that
// counts how often it was asked for the DB.
type countingDB struct {
	db     *sql.DB
	opened int
}

func (c *countingDB) DB() *sql.DB { c.opened++; return c.db }
func (c *countingDB) Close()      {}

// lazyCheckDB is a LazyDB that is also the server check's querier, as
// pgxlock's is: the check must run on its *sql.DB, on a connection of its
// own, so that the multiplexer probe (two connections announcing one
// backend) runs for pgxlock too; a query sent through the querier itself
// fails the test.
type lazyCheckDB struct {
	*countingDB
	t *testing.T
}

func (l lazyCheckDB) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	l.t.Errorf("%s ran on the LazyDB's querier, not on a connection of its own", q)
	return l.DB().QueryContext(ctx, q, args...)
}

func (l lazyCheckDB) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	l.t.Errorf("%s ran on the LazyDB's querier, not on a connection of its own", q)
	return l.DB().QueryRowContext(ctx, q, args...)
}

func TestCheckPostgresOnLazyDB(t *testing.T) {
	c := &countingDB{db: testdb.Open(t, testdb.Postgres)}
	verdict, err := checkPostgres(context.Background(), lazyCheckDB{c, t}, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := verdict(); err != nil {
		t.Fatal(err)
	}
	if c.opened != 1 {
		t.Errorf("the check asked the LazyDB for its *sql.DB %d time(s), want once", c.opened)
	}
}

// pgxlock's first calls on a cold pool share one server check, as the
// other adapters' do: of 200 callers at once, each with the lazily opened
// *sql.DB of its own call, only one opens it.
func TestCheckServerOnceOnLazyDBs(t *testing.T) {
	db := testdb.Open(t, testdb.Postgres)
	standIn := new(sql.DB) // the pool's cache key, as pgxlock's
	var (
		mu     sync.Mutex
		opened int
	)
	start := make(chan struct{})
	errc := make(chan error, 200)
	for range 200 {
		go func() {
			o, err := NewOp(Postgres, "Transaction", keys.Name("check-once-lazy"), config.New())
			if err != nil {
				errc <- err
				return
			}
			<-start
			errc <- CheckServerOn(context.Background(), o, standIn, lazyQuerierDB{db: db, open: func() { mu.Lock(); opened++; mu.Unlock() }})
		}()
	}
	close(start)
	for range 200 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if opened != 1 {
		t.Errorf("%d of 200 concurrent first calls opened their *sql.DB for the check, want 1", opened)
	}
}

// lazyQuerierDB is a LazyDB and check querier over db that counts its opens.
type lazyQuerierDB struct {
	db   *sql.DB
	open func()
}

func (l lazyQuerierDB) DB() *sql.DB { l.open(); return l.db }
func (l lazyQuerierDB) Close()      {}
func (l lazyQuerierDB) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return l.DB().QueryContext(ctx, q, args...)
}
func (l lazyQuerierDB) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return l.DB().QueryRowContext(ctx, q, args...)
}
