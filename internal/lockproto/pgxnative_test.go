package lockproto_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/pgxdriver"
	"github.com/ormlock/ormlock/internal/testdb"
)

// With Op.LockConns (pgxlock's pgx pool, through pgxdriver), Transaction's
// and Session's lock connection, given no *sql.DB, is the pgx pool's own,
// driven by pgx: the *sql.DB over the pool (the LazyDB) is neither asked
// for nor opens a connection, the pool's connection is released when the
// lock ends, and a second caller is refused while it is held. A caller
// that gives a *sql.DB (RunOnce's ledger, whose statements run through
// database/sql) pins from it. On PostgreSQL and behind PgBouncer.

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

// pgxOp is an Op of verb on k whose lock connections come from pool, and
// whose *sql.DB, asked for only where the protocol needs database/sql, is
// db (counted).
func pgxOp(t *testing.T, pool *pgxpool.Pool, db *lazyCount, verb string, k keys.Key) *lockproto.Op {
	t.Helper()
	o, err := lockproto.NewOp(lockproto.Postgres, verb, k, config.New())
	if err != nil {
		t.Fatal(err)
	}
	o.LockConns, o.LazyDB = pgxdriver.Pool(pool), db
	// a ping's timeout is the interval: 150ms leaves a loaded machine
	// (make test runs the suites side by side) room to answer
	o.Cfg.Keepalive = 150 * time.Millisecond
	return o
}

// lazyCount is a LazyDB over db that counts how often it was asked for it.
type lazyCount struct {
	db     *sql.DB
	opened int
}

func (c *lazyCount) DB() *sql.DB { c.opened++; return c.db }
func (c *lazyCount) Close()      {}
func (c *lazyCount) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return c.DB().QueryContext(ctx, q, args...)
}
func (c *lazyCount) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return c.DB().QueryRowContext(ctx, q, args...)
}

func TestPgxNativeLockConnection(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			ctx := context.Background()
			pool, db := pgxPoolOf(t, k)
			lazy := &lazyCount{db: db}
			key := keys.Name(testdb.Table(t, k, "pgxnative"))

			t.Run("Transaction", func(t *testing.T) {
				o := pgxOp(t, pool, lazy, "Transaction", key)
				lt, err := o.BeginLocked(ctx, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := lt.Tx.(*lockproto.OneMessageTx); !ok {
					t.Fatalf("Tx is %T, want the one-message transaction", lt.Tx)
				}
				if sc, lc, err := lt.Conn(); err != nil || sc != nil || lc == nil {
					t.Fatalf("the lock connection: %v, %v, %v; want the pgx pool's", sc, lc, err)
				}
				if n := db.Stats().OpenConnections; n != 0 {
					t.Errorf("database/sql opened %d connection(s)", n)
				}
				if n := pool.Stat().AcquiredConns(); n != 1 {
					t.Errorf("%d connection(s) of the pool acquired while the lock is held, want 1", n)
				}
				pc, err := pgxdriver.TxConn(lt)
				if err != nil {
					t.Fatalf("TxConn: %v", err)
				}
				var pid uint32
				if err := pc.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil || pid == 0 {
					t.Fatalf("a statement on TxConn's connection: %v", err)
				}
				if _, err := pc.Exec(ctx, "SELECT 1"); err != nil {
					t.Fatal(err)
				}
				other := pgxOp(t, pool, lazy, "Transaction", key)
				if _, err := other.BeginLocked(ctx, nil, nil); !errors.Is(err, errs.ErrNotAcquired) {
					t.Fatalf("a second Transaction on the held key: %v, want ErrNotAcquired", err)
				}
				if err := lt.Commit(); err != nil {
					t.Fatal(err)
				}
				if n := pool.Stat().AcquiredConns(); n != 0 {
					t.Errorf("%d connection(s) still acquired after COMMIT", n)
				}
				again := pgxOp(t, pool, lazy, "Transaction", key)
				lt, err = again.BeginLocked(ctx, nil, nil)
				if err != nil {
					t.Fatalf("the key after COMMIT: %v", err)
				}
				if err := lt.Rollback(); err != nil {
					t.Fatal(err)
				}
			})

			t.Run("Session", func(t *testing.T) {
				o := pgxOp(t, pool, lazy, "Session", key)
				err := o.Session(ctx, nil, func(ctx context.Context) error {
					if n := db.Stats().OpenConnections; n != 0 {
						t.Errorf("database/sql opened %d connection(s)", n)
					}
					if n := pool.Stat().AcquiredConns(); n != 1 {
						t.Errorf("%d connection(s) of the pool acquired while the lock is held, want 1", n)
					}
					time.Sleep(400 * time.Millisecond) // keepalives on the pgx connection
					other := pgxOp(t, pool, lazy, "Transaction", key)
					if _, err := other.BeginLocked(ctx, nil, nil); !errors.Is(err, errs.ErrNotAcquired) {
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
				open := &lazyCount{db: db}
				o := pgxOp(t, pool, open, "Transaction", key)
				lt, err := o.BeginLocked(ctx, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := lt.Commit(); err != nil {
					t.Fatal(err)
				}
				s := pgxOp(t, pool, open, "Session", key)
				if err := s.Session(ctx, nil, func(context.Context) error { return nil }); err != nil {
					t.Fatal(err)
				}
				if open.opened != 0 {
					t.Errorf("the *sql.DB was opened %d time(s) by a Transaction and a Session on the pool's connection", open.opened)
				}
				// the split protocol runs on database/sql
				rr := pgxOp(t, pool, open, "Transaction", key)
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

			// a caller whose statements need database/sql on fn's
			// transaction (RunOnce's ledger) gives the *sql.DB: the lock
			// connection is pinned from it, still in one message
			t.Run("a *sql.DB given", func(t *testing.T) {
				o := pgxOp(t, pool, lazy, "RunOnce", key)
				lt, err := o.BeginLocked(ctx, db, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer lt.Rollback()
				if _, ok := lt.Tx.(*lockproto.OneMessageTx); !ok {
					t.Fatalf("Tx is %T, want the one-message transaction", lt.Tx)
				}
				if sc, lc, err := lt.Conn(); err != nil || sc == nil || lc != nil {
					t.Fatalf("the lock connection: %v, %v, %v; want a *sql.Conn of db", sc, lc, err)
				}
				var one int
				if err := lt.Tx.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
					t.Fatalf("a query through database/sql in the transaction: %v", err)
				}
			})

			t.Run("Session lost", func(t *testing.T) {
				o := pgxOp(t, pool, lazy, "Session", key)
				err := o.Session(ctx, nil, func(fctx context.Context) error {
					var pid int
					k := uint64(o.Target().Postgres().Int64)
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
