package failover_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/sqllock"
)

// TestServerCheckAskedAgainAfterLoss: a pool whose server check passed on
// the primary loses its holder's connection when the address it reaches
// moves to a hot standby (a failover pointed the wrong way, or a demoted
// primary back as a standby). The pool's cached verdict must not outlive
// the loss: the next verb asks again and is refused on the standby, fn
// never run.
func TestServerCheckAskedAgainAfterLoss(t *testing.T) {
	topology(t)
	r := testdb.StartPGReplication(t, false)
	db := openFront(t, r)
	ctx := context.Background()
	txFn := func(context.Context, *sql.Tx) error { return nil }
	if err := sqllock.Transaction(ctx, db, "reask", txFn); err != nil {
		t.Fatalf("Transaction on the primary: %v", err)
	}
	lost := make(chan error, 1)
	inFn := make(chan struct{})
	go func() {
		lost <- sqllock.Session(ctx, db, "reask-session", func(ctx context.Context) error {
			close(inFn)
			<-ctx.Done()
			return context.Cause(ctx)
		}, ormlock.WithKeepalive(300*time.Millisecond))
	}()
	<-inFn
	r.Front.SetUpstream(r.Standby.Addr())
	r.Front.Cut()
	select {
	case err := <-lost:
		if !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("Session: %v, want ErrLockLost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Session did not learn of the loss in 10s")
	}
	ran := false
	err := sqllock.Transaction(ctx, db, "reask", func(context.Context, *sql.Tx) error { ran = true; return nil })
	if !errors.Is(err, ormlock.ErrUnsupportedDialect) || ran {
		t.Errorf("Transaction after the loss, the pool now on a standby: %v (fn ran: %v), want ErrUnsupportedDialect: the verdict cached on the primary was trusted", err, ran)
	}
}
