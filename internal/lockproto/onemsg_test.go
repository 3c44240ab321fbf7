package lockproto_test

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	keyspkg "github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

// The one-message BEGIN and lock writes keys as integer literals: the
// extremes of both key spaces must name the very lock the extended
// protocol's parameters name, try-once and waiting, and a loser leaves the
// connection idle outside any transaction, back in the pool.
func TestOneMessageKeys(t *testing.T) {
	ctx := context.Background()
	keys := []ormlock.Key{
		ormlock.ID(math.MinInt64), ormlock.ID(math.MaxInt64), ormlock.ID(-1), ormlock.ID(0),
		ormlock.Pair(math.MinInt32, math.MaxInt32), ormlock.Pair(-1, 0),
	}
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			db := testdb.Open(t, k)
			other := testdb.Open(t, k)
			t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db, other) })
			for _, key := range keys {
				for _, wait := range []time.Duration{0, 30 * time.Millisecond} {
					cfg := config.Config{Wait: wait}
					op, err := lockproto.NewOp(lockproto.Postgres, "Transaction", key, cfg)
					if err != nil {
						t.Fatal(err)
					}
					lt, err := op.BeginLocked(ctx, db, nil)
					if err != nil {
						t.Fatalf("%v wait %v: %v", key, wait, err)
					}
					if _, ok := lt.Tx.(*lockproto.OneMessageTx); !ok {
						t.Fatalf("Tx is %T, want the one-message *lockproto.OneMessageTx", lt.Tx)
					}
					// the hand-written, extended-protocol try on the same key loses
					tx, err := other.BeginTx(ctx, nil)
					if err != nil {
						t.Fatal(err)
					}
					if ok, err := lockproto.PGTryXact(ctx, tx, keyspkg.Postgres(keyspkg.Key(key), ""), nil, nil); err != nil || ok {
						t.Fatalf("%v: hand-written try while held: %v %v", key, ok, err)
					}
					_ = tx.Rollback()
					// and so does a second one-message call
					op2, _ := lockproto.NewOp(lockproto.Postgres, "Transaction", key, cfg)
					if _, err := op2.BeginLocked(ctx, other, nil); !errors.Is(err, ormlock.ErrNotAcquired) {
						t.Fatalf("%v wait %v: second holder: %v", key, wait, err)
					}
					if err := lt.Commit(); err != nil {
						t.Fatal(err)
					}
				}
			}
			if s := other.Stats(); s.InUse != 0 || s.OpenConnections == 0 {
				t.Fatalf("loser's connection not back in the pool: %+v", s)
			}
		})
	}
}

// OneMessageTx ends like a *sql.Tx: after Commit, statements fail with
// sql.ErrTxDone and a second Commit or Rollback too; a statement on an
// ended context fails without reaching the connection, which stays usable.
func TestOneMessageTxEnd(t *testing.T) {
	ctx := context.Background()
	db := testdb.Open(t, testdb.Postgres)
	t.Cleanup(func() { testdb.AssertNoLeaks(t, testdb.Postgres, db) })
	op, err := lockproto.NewOp(lockproto.Postgres, "Transaction", ormlock.Name(t.Name()), config.Config{})
	if err != nil {
		t.Fatal(err)
	}
	lt, err := op.BeginLocked(ctx, db, &sql.TxOptions{Isolation: sql.LevelReadCommitted, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var ro string
	if err := lt.Tx.QueryRowContext(ctx, "SHOW transaction_read_only").Scan(&ro); err != nil || ro != "on" {
		t.Fatalf("READ ONLY: %q %v", ro, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := lt.Tx.ExecContext(cctx, "SELECT 1"); !errors.Is(err, context.Canceled) {
		t.Fatalf("on a cancelled context: %v", err)
	}
	if err := lt.Tx.QueryRowContext(cctx, "SELECT 1").Scan(new(int)); !errors.Is(err, context.Canceled) {
		t.Fatalf("QueryRow on a cancelled context: %v", err)
	}
	if _, err := lt.Tx.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatalf("after the cancelled statements: %v", err)
	}
	if err := lt.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := lt.Tx.ExecContext(ctx, "SELECT 1"); !errors.Is(err, sql.ErrTxDone) {
		t.Fatalf("after Commit: %v", err)
	}
	if err := lt.Tx.Rollback(); !errors.Is(err, sql.ErrTxDone) {
		t.Fatalf("Rollback after Commit: %v", err)
	}
}
