package pgxlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/pgxlock"
)

func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }

// newPool opens a pool of n connections on dsn, with the DSN's
// default_query_exec_mode replaced by mode when mode is set; it is checked
// for held connections and locks when the test ends.
func newPool(t *testing.T, k testdb.Kind, mode string, n int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testdb.DSN(t, k))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = n
	if mode != "" {
		m, ok := map[string]pgx.QueryExecMode{
			"simple_protocol": pgx.QueryExecModeSimpleProtocol,
			"exec":            pgx.QueryExecModeExec,
			"describe_exec":   pgx.QueryExecModeDescribeExec,
			"cache_describe":  pgx.QueryExecModeCacheDescribe,
			"cache_statement": pgx.QueryExecModeCacheStatement,
		}[mode]
		if !ok {
			t.Fatalf("mode %q", mode)
		}
		cfg.ConnConfig.DefaultQueryExecMode = m
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	t.Cleanup(func() {
		testdb.AssertNoLeaks(t, k)
		if n := pool.Stat().AcquiredConns(); n != 0 {
			t.Errorf("%d connection(s) still acquired", n)
		}
	})
	return pool
}

// Behind PgBouncer 1.18 in transaction mode, every verb works with the exec
// modes that keep no prepared statement past one message: simple_protocol
// and exec. describe_exec and the cache modes are documented as needing
// PgBouncer 1.21 with max_prepared_statements (describe_exec's unnamed
// statement, described in one sync and run in the next, may meet another
// server connection outside a transaction).
func TestPgBouncerExecModes(t *testing.T) {
	for _, mode := range []string{"simple_protocol", "exec"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			pool := newPool(t, testdb.PgBouncer, mode, 3)
			ctx := context.Background()
			for i := range 20 {
				key := fmt.Sprintf("pgxlock-mode-%s-%d", t.Name(), i%3)
				err := pgxlock.Transaction(ctx, pool, key, func(ctx context.Context, tx pgx.Tx) error {
					var n int64
					if err := tx.QueryRow(ctx, "SELECT $1::int8 + 1", int64(i)).Scan(&n); err != nil {
						return err
					}
					if n != int64(i)+1 {
						return fmt.Errorf("got %d", n)
					}
					return nil
				})
				if err != nil {
					t.Fatalf("Transaction %d: %v", i, err)
				}
				err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					return pgxlock.Lock(ctx, tx, ormlock.All(key, key+"-b"), ormlock.WithWait(time.Second))
				})
				if err != nil {
					t.Fatalf("Lock %d: %v", i, err)
				}
			}
		})
	}
}

// A fenced write checked on pgx's CommandTag: the holder's token passes,
// as often as it writes; a smaller token is refused with ErrStaleToken.
func TestCheckFenced(t *testing.T) {
	k := testdb.Postgres
	pool := newPool(t, k, "", 4)
	ctx := context.Background()
	tbl := testdb.Table(t, k, "f")
	if err := pgxlock.Migrate(ctx, pool, ormlock.WithLedgerTable(tbl)); err != nil {
		t.Fatal(err)
	}
	res := "fenced_" + tbl
	if _, err := pool.Exec(ctx, "CREATE TABLE "+res+" (id int PRIMARY KEY, v int, fence int8 NOT NULL DEFAULT 0)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + res) })
	if _, err := pool.Exec(ctx, "INSERT INTO "+res+" (id, v) VALUES (1, 0)"); err != nil {
		t.Fatal(err)
	}
	update := "UPDATE " + res + " SET v = v + 1, fence = $1 WHERE id = 1 AND fence <= $1"
	var token int64
	err := pgxlock.Transaction(ctx, pool, "pgxlock-fenced", func(ctx context.Context, tx pgx.Tx) error {
		tok, ok := ormlock.FencingToken(ctx)
		if !ok {
			return errors.New("no token in fn's ctx")
		}
		token = tok
		for range 2 {
			if err := pgxlock.CheckFenced(tx.Exec(ctx, update, tok)); err != nil {
				return err
			}
		}
		return nil
	}, ormlock.WithFencing(), ormlock.WithLedgerTable(tbl))
	if err != nil {
		t.Fatal(err)
	}
	if err := pgxlock.CheckFenced(pool.Exec(ctx, update, token-1)); !errors.Is(err, ormlock.ErrStaleToken) {
		t.Fatalf("stale token: %v, want ErrStaleToken", err)
	}
	if err := pgxlock.CheckFenced(pool.Exec(ctx, "UPDATE "+res+" SET v = 0 WHERE id = $1", "x")); err == nil || errors.Is(err, ormlock.ErrStaleToken) {
		t.Fatalf("failed statement: %v, want its own error", err)
	}
}

// fn may end the transaction itself: Commit commits and frees the lock at
// once, Rollback rolls back; savepoints nest as in pgx.
func TestFnEndsTransaction(t *testing.T) {
	k := testdb.Postgres
	pool := newPool(t, k, "", 4)
	ctx := context.Background()
	key := "pgxlock-fn-ends"
	err := pgxlock.Transaction(ctx, pool, key, func(ctx context.Context, tx pgx.Tx) error {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := sp.Exec(ctx, "SELECT 1"); err != nil {
			return err
		}
		if err := sp.Rollback(ctx); err != nil {
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		if !testdb.RawFree(t, k, "", key) {
			return errors.New("lock still held after tx.Commit")
		}
		if _, err := tx.Exec(ctx, "SELECT 1"); !errors.Is(err, pgx.ErrTxClosed) {
			return fmt.Errorf("Exec after Commit: %v, want ErrTxClosed", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = pgxlock.Transaction(ctx, pool, key, func(ctx context.Context, tx pgx.Tx) error {
		return tx.Rollback(ctx)
	})
	if err != nil {
		t.Fatalf("fn rolled back: %v", err)
	}
}

// pgxlock is PostgreSQL only: a pool pointed at a MySQL/MariaDB server
// fails without calling fn, and a MySQL URL is no pgx pool at all.
func TestMySQLRefused(t *testing.T) {
	if _, err := pgxpool.ParseConfig("mysql://root@127.0.0.1:3306/db"); err == nil {
		t.Error("pgx parsed a MySQL URL")
	}
	dsn := testdb.DSN(t, testdb.MariaDB) // root@tcp(127.0.0.1:PORT)/db?...
	wantNotPostgres(t, "a MariaDB server", dsn[strings.Index(dsn, "(")+1:strings.Index(dsn, ")")])
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	fn := func(context.Context, pgx.Tx) error { return nil }
	var nilCtx context.Context
	pool := &pgxpool.Pool{}
	cases := map[string]error{
		"nil pool":     pgxlock.Transaction(ctx, nil, "k", fn),
		"nil fn":       pgxlock.Transaction(ctx, pool, "k", nil),
		"nil context":  pgxlock.Session(nilCtx, pool, "k", func(context.Context) error { return nil }),
		"nil schedule": pgxlock.RunScheduled(ctx, pool, "job", nil, fn),
		"Runs nil":     func() error { _, err := pgxlock.Runs(ctx, nil, "job", 1); return err }(),
		"Lock nil tx":  pgxlock.Lock(ctx, nil, "k"),
	}
	for name, err := range cases {
		if !errors.Is(err, ormlock.ErrInvalidArgument) || strings.Count(err.Error(), "ormlock: ") != 1 {
			t.Errorf("%s: %v, want ErrInvalidArgument with one \"ormlock: \"", name, err)
		}
	}
}

// pgx's large-object API works on the locked transaction.
func TestLargeObjects(t *testing.T) {
	pool := newPool(t, testdb.Postgres, "", 2)
	ctx := context.Background()
	err := pgxlock.Transaction(ctx, pool, "pgxlock-lo", func(ctx context.Context, tx pgx.Tx) error {
		lo := tx.LargeObjects()
		oid, err := lo.Create(ctx, 0)
		if err != nil {
			return err
		}
		obj, err := lo.Open(ctx, oid, pgx.LargeObjectModeWrite|pgx.LargeObjectModeRead)
		if err != nil {
			return err
		}
		if _, err := obj.Write([]byte("locked")); err != nil {
			return err
		}
		if _, err := obj.Seek(0, 0); err != nil {
			return err
		}
		buf := make([]byte, 6)
		if _, err := obj.Read(buf); err != nil || string(buf) != "locked" {
			return fmt.Errorf("read %q, %v", buf, err)
		}
		return lo.Unlink(ctx, oid)
	})
	if err != nil {
		t.Fatal(err)
	}
}
