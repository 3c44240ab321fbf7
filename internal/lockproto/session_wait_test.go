package lockproto_test

import (
	"context"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

// A Session that waits for its lock reads the session's
// idle_in_transaction_session_timeout from the last column of the lock
// message, not the lock_timeout the wait restores, so its keepalive runs
// within the timeout and the idle lock transaction survives a fn longer
// than it. Directly on PostgreSQL only: PgBouncer refuses the start-up
// parameter that sets the timeout here.
func TestSessionWaitIdleTimeout(t *testing.T) {
	k := testdb.Postgres
	db := openWithParam(t, k, "idle_in_transaction_session_timeout=1200")
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
	op, err := lockproto.NewOp(lockproto.Postgres, "Session", ormlock.Name(t.Name()), config.New(ormlock.WithWait(time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	err = op.Session(context.Background(), db, func(ctx context.Context) error {
		select {
		case <-time.After(3 * time.Second): // idle well past the 1.2 s timeout
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	if err != nil {
		t.Fatalf("Session over a 1.2 s idle timeout, with a wait: %v", err)
	}
}
