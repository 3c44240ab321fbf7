package entlock_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	entsql "entgo.io/ent/dialect/sql"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/enttest"
	"github.com/ormlock/ormlock/internal/enttest/ent"
	"github.com/ormlock/ormlock/internal/faults"
	"github.com/ormlock/ormlock/internal/testdb"
)

// grace is how long after its deadline a call may return.
const grace = 2 * time.Second

// verb is one entlock verb, called with a trivial fn.
type verb struct {
	name string
	call func(ctx context.Context, c *ent.Client, key string) error
}

// verbs are the verbs a deadline must bound; ledger is RunOnce's table.
func verbs(ledger string) []verb {
	nop := func(*ent.Tx) error { return nil }
	return []verb{
		{"Transaction", func(ctx context.Context, c *ent.Client, key string) error {
			return entlock.Transaction(ctx, c, key, nop)
		}},
		{"TransactionWait", func(ctx context.Context, c *ent.Client, key string) error {
			return entlock.Transaction(ctx, c, key, nop, ormlock.WithWait(time.Minute))
		}},
		{"RunOnce", func(ctx context.Context, c *ent.Client, key string) error {
			return entlock.RunOnce(ctx, c, key, slotAt(0), nop, ormlock.WithLedgerTable(ledger), ormlock.WithWait(time.Minute))
		}},
		{"Session", func(ctx context.Context, c *ent.Client, key string) error {
			return entlock.Session(ctx, c, key, func(context.Context) error { return nil }, ormlock.WithWait(time.Minute))
		}},
	}
}

// notAcquiredByDeadline calls v with a deadline and checks that it returns
// within the deadline plus grace, with an error matching both
// ErrNotAcquired and context.DeadlineExceeded.
func notAcquiredByDeadline(t *testing.T, c *ent.Client, v verb, key string, deadline time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	err := v.call(ctx, c, key)
	faults.Within(t, v.name, start, deadline+grace)
	if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%s: %v, want ErrNotAcquired and DeadlineExceeded", v.name, err)
	}
}

func TestDeadlinePoolExhausted(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		c, db := openEnt(t, k)
		ledger := ledgerTable(t, k, c)
		db.SetMaxOpenConns(1)
		conn, err := db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range verbs(ledger) {
			notAcquiredByDeadline(t, c, v, "pool-"+t.Name()+v.name, 300*time.Millisecond)
		}
		_ = conn.Close()
	})
}

func TestDeadlineSilentServer(t *testing.T) {
	for _, dialect := range []string{"postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			addr := faults.Silent(t)
			driver, dsn := "pgx", "postgres://u:p@"+addr+"/db?sslmode=disable"
			if dialect == "mysql" {
				driver, dsn = "mysql", "u:p@tcp("+addr+")/db"
			}
			db, err := sql.Open(driver, dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			c := ent.NewClient(ent.Driver(entlock.Wrap(entsql.OpenDB(dialect, db))))
			for _, v := range verbs("ormlock_runs") {
				notAcquiredByDeadline(t, c, v, "silent", time.Second)
			}
			if n := db.Stats().InUse; n != 0 {
				t.Errorf("InUse = %d after the calls", n)
			}
		})
	}
}

func TestDeadlineFrozenIdleBackend(t *testing.T) {
	k := testdb.Postgres
	c, db := openEnt(t, k)
	ledger := ledgerTable(t, k, c)
	db.SetMaxIdleConns(1)
	for _, v := range verbs(ledger) {
		t.Run(v.name, func(t *testing.T) {
			resume := faults.Freeze(t, faults.PGBackendPID(t, db)) // the pool's one idle connection
			notAcquiredByDeadline(t, c, v, "frozen-"+t.Name(), time.Second)
			resume()
		})
	}
}

// See gormlock's TestDeadlineFrozenDuringFn.
func TestDeadlineFrozenDuringFn(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		for _, iso := range []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelRepeatableRead} {
			for _, late := range []bool{false, true} {
				name := string(k) + "/" + iso.String()
				if late {
					name += "/fnPastDeadline"
				}
				t.Run(name, func(t *testing.T) {
					c, _ := openEnt(t, k)
					owner := enttest.Owner(t, k)
					const deadline = 2 * time.Second
					ctx, cancel := context.WithTimeout(context.Background(), deadline)
					defer cancel()
					var resume func()
					start := time.Now()
					err := entlock.Transaction(ctx, c, "frozen-fn-"+t.Name(), func(tx *ent.Tx) error {
						rows, err := tx.QueryContext(ctx, "SELECT pg_backend_pid()")
						if err != nil {
							return err
						}
						var pid int
						for rows.Next() {
							_ = rows.Scan(&pid)
						}
						_ = rows.Close()
						if err := insert(ctx, tx, owner, 1); err != nil {
							return err
						}
						resume = faults.Freeze(t, pid)
						if late {
							<-ctx.Done()
						}
						return nil
					}, ormlock.WithTxOptions(&sql.TxOptions{Isolation: iso}))
					faults.Within(t, "Transaction", start, deadline+grace)
					if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ormlock.ErrNotAcquired) {
						t.Errorf("Transaction: %v, want DeadlineExceeded (after the lock)", err)
					}
					if resume != nil {
						resume()
					}
					if late {
						if n := count(t, k, owner); n != 0 {
							t.Errorf("rows after a rollback: %d, want 0", n)
						}
					}
				})
			}
		}
	}
}
