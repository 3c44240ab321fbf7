package lockproto_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

// A dial cut by the caller's deadline is classified as not acquired, with
// the context's error, not returned as a bare network error.
func TestDialTimeoutIsNotAcquired(t *testing.T) {
	for _, k := range testdb.Kinds() {
		t.Run(string(k), func(t *testing.T) {
			db := testdb.Open(t, k) // new pool: the call must dial
			t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
			d, err := lockproto.DialectOf(k.Dialect())
			if err != nil {
				t.Fatal(err)
			}
			for _, opts := range []*sql.TxOptions{nil, {Isolation: sql.LevelRepeatableRead}} {
				op, err := lockproto.NewOp(d, "Transaction", keys.Name("dial-"+t.Name()), config.New())
				if err != nil {
					t.Fatal(err)
				}
				lt, err := op.BeginLocked(lockproto.PastDeadline{Context: context.Background()}, db, opts)
				if err == nil {
					_ = lt.Rollback()
					t.Fatal("BeginLocked dialed past the deadline")
				}
				if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("BeginLocked: %v, want ErrNotAcquired and DeadlineExceeded", err)
				}
			}
		})
	}
}
