package lockproto_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

// passedDeadline is a context whose deadline has passed but whose timer has
// not fired yet (Err is nil, Done never closes): the instant at which a
// dialer, which takes the deadline itself, reports "i/o timeout".
type passedDeadline struct{ context.Context }

func (passedDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

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
				op, err := lockproto.NewOp(d, "Transaction", ormlock.Name("dial-"+t.Name()), config.New())
				if err != nil {
					t.Fatal(err)
				}
				lt, err := op.BeginLocked(passedDeadline{context.Background()}, db, opts)
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
