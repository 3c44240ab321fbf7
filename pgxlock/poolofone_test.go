package pgxlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/pgxlock"
)

// On a pool of one connection, the lock connection is the pool's only one:
// Transaction and Session run (fn's tx is that connection), a second
// caller waiting for the pool is refused when its context ends instead of
// waiting for ever, Shared keys take the same path, and the verbs that need
// a second connection say so before anything is taken. On PostgreSQL and
// behind PgBouncer.
func TestPoolOfOne(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			ctx := context.Background()
			pool := newPool(t, k, "", 1)
			key := "pgxlock-one-" + t.Name()

			err := pgxlock.Transaction(ctx, pool, key, func(ctx context.Context, tx pgx.Tx) error {
				if n := pool.Stat().AcquiredConns(); n != 1 {
					t.Errorf("%d connections acquired while fn runs, want the one", n)
				}
				var one int
				if err := tx.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
					return err
				}
				// the pool is empty: a second Transaction waits for it, and
				// its deadline ends the wait with the lock not acquired
				wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancel()
				err := pgxlock.Transaction(wctx, pool, key+"-other", func(context.Context, pgx.Tx) error {
					t.Error("fn of a Transaction that got no connection ran")
					return nil
				})
				if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("a Transaction on an empty pool: %v, want ErrNotAcquired and DeadlineExceeded", err)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}

			if err := pgxlock.Session(ctx, pool, ormlock.Shared(ormlock.Name(key)), func(ctx context.Context) error {
				if n := pool.Stat().AcquiredConns(); n != 1 {
					t.Errorf("%d connections acquired while a Session holds the lock, want 1", n)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}

			// a token is committed on a second connection while the lock's
			// transaction stays open: refused, naming the pool size
			err = pgxlock.Transaction(ctx, pool, key, func(context.Context, pgx.Tx) error {
				t.Error("fn ran with WithFencing on a pool of one")
				return nil
			}, ormlock.WithFencing())
			if !errors.Is(err, ormlock.ErrInvalidArgument) {
				t.Errorf("WithFencing on a pool of one: %v, want ErrInvalidArgument", err)
			}
			if n := pool.Stat().AcquiredConns(); n != 0 {
				t.Errorf("%d connections still acquired", n)
			}
		})
	}
}
