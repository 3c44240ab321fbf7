package lockproto

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/testdb"
)

// With Op.Pgx (pgxlock), Transaction's and Session's lock connection is
// the pgx pool's own, driven by pgx: the *sql.DB over the pool opens no
// connection of its own, the pool's connection is released when the lock
// ends, and a second caller is refused while it is held. On PostgreSQL and
// behind PgBouncer.

func pgxPoolOf(t *testing.T, k testdb.Kind) (*pgxpool.Pool, *sql.DB) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testdb.DSN(t, k))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() {
		_ = db.Close()
		for until := time.Now().Add(5 * time.Second); pool.Stat().AcquiredConns() != 0 && time.Now().Before(until); {
			time.Sleep(10 * time.Millisecond)
		}
		if n := pool.Stat().AcquiredConns(); n != 0 {
			t.Errorf("%d connection(s) of the pool still acquired", n)
		}
		pool.Close()
	})
	return pool, db
}

func pgxOp(t *testing.T, pool *pgxpool.Pool, verb string, k keys.Key) *Op {
	t.Helper()
	o, err := NewOp(Postgres, verb, k, config.New())
	if err != nil {
		t.Fatal(err)
	}
	o.Pgx = pool
	o.Cfg.Keepalive = 50 * time.Millisecond
	return o
}

func TestPgxNativeLockConnection(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			ctx := context.Background()
			pool, db := pgxPoolOf(t, k)
			key := keys.Name(testdb.Table(t, k, "pgxnative"))

			t.Run("Transaction", func(t *testing.T) {
				o := pgxOp(t, pool, "Transaction", key)
				lt, err := o.BeginLocked(ctx, db, nil)
				if err != nil {
					t.Fatal(err)
				}
				ct, ok := lt.Tx.(*OneMessageTx)
				if !ok {
					t.Fatalf("Tx is %T, want the one-message transaction", lt.Tx)
				}
				if _, ok := ct.pin.(*pgxPin); !ok {
					t.Fatalf("the lock connection is %T, want the pgx pool's", ct.pin)
				}
				if n := db.Stats().OpenConnections; n != 0 {
					t.Errorf("database/sql opened %d connection(s)", n)
				}
				if n := pool.Stat().AcquiredConns(); n != 1 {
					t.Errorf("%d connection(s) of the pool acquired while the lock is held, want 1", n)
				}
				pc, err := lt.PgxConn()
				if err != nil || pc != ct.pin.(*pgxPin).c.Conn() {
					t.Fatalf("PgxConn = %p, %v: not the pool's connection", pc, err)
				}
				if _, err := pc.Exec(ctx, "SELECT 1"); err != nil {
					t.Fatal(err)
				}
				other := pgxOp(t, pool, "Transaction", key)
				if _, err := other.BeginLocked(ctx, db, nil); !errors.Is(err, errs.ErrNotAcquired) {
					t.Fatalf("a second Transaction on the held key: %v, want ErrNotAcquired", err)
				}
				if err := lt.Commit(); err != nil {
					t.Fatal(err)
				}
				if n := pool.Stat().AcquiredConns(); n != 0 {
					t.Errorf("%d connection(s) still acquired after COMMIT", n)
				}
				again := pgxOp(t, pool, "Transaction", key)
				lt, err = again.BeginLocked(ctx, db, nil)
				if err != nil {
					t.Fatalf("the key after COMMIT: %v", err)
				}
				if err := lt.Rollback(); err != nil {
					t.Fatal(err)
				}
			})

			t.Run("Session", func(t *testing.T) {
				o := pgxOp(t, pool, "Session", key)
				err := o.Session(ctx, db, func(ctx context.Context) error {
					if n := db.Stats().OpenConnections; n != 0 {
						t.Errorf("database/sql opened %d connection(s)", n)
					}
					if n := pool.Stat().AcquiredConns(); n != 1 {
						t.Errorf("%d connection(s) of the pool acquired while the lock is held, want 1", n)
					}
					time.Sleep(200 * time.Millisecond) // keepalives on the pgx connection
					other := pgxOp(t, pool, "Transaction", key)
					if _, err := other.BeginLocked(ctx, db, nil); !errors.Is(err, errs.ErrNotAcquired) {
						t.Errorf("a Transaction on the Session's key: %v, want ErrNotAcquired", err)
					}
					return ctx.Err()
				})
				if err != nil {
					t.Fatal(err)
				}
				if n := pool.Stat().AcquiredConns(); n != 0 {
					t.Errorf("%d connection(s) still acquired after the Session", n)
				}
			})

			t.Run("no *sql.DB unless needed", func(t *testing.T) {
				open := &countingDB{db: db}
				o := pgxOp(t, pool, "Transaction", key)
				o.LazyDB = open
				lt, err := o.BeginLocked(ctx, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := lt.Commit(); err != nil {
					t.Fatal(err)
				}
				s := pgxOp(t, pool, "Session", key)
				s.LazyDB = open
				if err := s.Session(ctx, nil, func(context.Context) error { return nil }); err != nil {
					t.Fatal(err)
				}
				if open.opened != 0 {
					t.Errorf("the *sql.DB was opened %d time(s) by a Transaction and a Session on the pool's connection", open.opened)
				}
				// the split protocol runs on database/sql
				rr := pgxOp(t, pool, "Transaction", key)
				rr.LazyDB = open
				lt, err = rr.BeginLocked(ctx, nil, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
				if err != nil {
					t.Fatal(err)
				}
				if err := lt.Rollback(); err != nil {
					t.Fatal(err)
				}
				if open.opened == 0 {
					t.Error("REPEATABLE READ did not open the *sql.DB")
				}
			})

			t.Run("Session lost", func(t *testing.T) {
				o := pgxOp(t, pool, "Session", key)
				err := o.Session(ctx, db, func(fctx context.Context) error {
					var pid int
					k := uint64(o.PostgresKey().Int64)
					if err := pool.QueryRow(ctx, "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = $1 AND objid = $2", int64(k>>32), int64(uint32(k))).Scan(&pid); err != nil {
						return err
					}
					if _, err := testdb.Open(t, testdb.Postgres).ExecContext(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
						return err
					}
					<-fctx.Done()
					return context.Cause(fctx)
				})
				if !errors.Is(err, errs.ErrLockLost) {
					t.Fatalf("Session after its backend was terminated: %v, want ErrLockLost", err)
				}
				for until := time.Now().Add(5 * time.Second); pool.Stat().AcquiredConns() != 0 && time.Now().Before(until); {
					time.Sleep(10 * time.Millisecond)
				}
				// every connection left in the pool works: the one whose
				// backend was terminated did not go back
				idle := pool.AcquireAllIdle(ctx)
				for _, c := range idle {
					if _, err := c.Exec(ctx, "SELECT 1"); err != nil {
						t.Errorf("a connection the pool kept after the loss: %v", err)
					}
					c.Release()
				}
			})
		})
	}
}

// countingDB is a LazyDB that counts how often it was asked for the DB.
type countingDB struct {
	db     *sql.DB
	opened int
}

func (c *countingDB) DB() *sql.DB { c.opened++; return c.db }
func (c *countingDB) Close()      {}
func (c *countingDB) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return c.DB().QueryContext(ctx, q, args...)
}
func (c *countingDB) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return c.DB().QueryRowContext(ctx, q, args...)
}

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
	_, db := pgxPoolOf(t, testdb.Postgres)
	c := &countingDB{db: db}
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
	_, db := pgxPoolOf(t, testdb.Postgres)
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
			errc <- o.CheckServerOn(context.Background(), standIn, lazyQuerierDB{db: db, open: func() { mu.Lock(); opened++; mu.Unlock() }})
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
