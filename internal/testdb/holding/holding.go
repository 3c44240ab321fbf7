// Package holding is a Session that a test holds in the background and
// watches for a loss: the lease tests of the conformance suite and of the
// failover package share it.
package holding

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/sqllock"
)

// Holding is a sqllock Session held in the background until Release.
type Holding struct {
	Epoch   int64         // fn's fencing token
	Done    chan struct{} // closed when fn's ctx ended
	Cause   error         // context.Cause of fn's ctx, set before Done closes
	EndedAt time.Time     // when fn saw its ctx end
	Err     chan error    // Session's result
	Release func()        // makes fn return nil (idempotent)
}

// Start starts a Session of key on db with opts and waits until fn runs;
// the test fails when it does not within 30s. The Session is released at
// the test's end.
func Start(t testing.TB, db *sql.DB, key string, opts ...ormlock.Option) *Holding {
	t.Helper()
	h := &Holding{Done: make(chan struct{}), Err: make(chan error, 1)}
	stop := make(chan struct{})
	var once sync.Once
	h.Release = func() { once.Do(func() { close(stop) }) }
	in := make(chan struct{})
	go func() {
		h.Err <- sqllock.Session(context.Background(), db, key, func(ctx context.Context) error {
			h.Epoch, _ = ormlock.FencingToken(ctx)
			close(in)
			select {
			case <-ctx.Done():
				h.EndedAt = time.Now()
				h.Cause = context.Cause(ctx)
				close(h.Done)
				return ctx.Err()
			case <-stop:
				return nil
			}
		}, opts...)
	}()
	select {
	case <-in:
	case err := <-h.Err:
		t.Fatalf("Session %q: %v", key, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("Session %q: not held after 30s", key)
	}
	t.Cleanup(h.Release)
	return h
}

// Lost reports whether fn's ctx has ended.
func (h *Holding) Lost() bool {
	select {
	case <-h.Done:
		return true
	default:
		return false
	}
}

// WaitCancelled waits up to d for fn's ctx to end and checks its cause is
// ErrLockLost; what names the holder in the failures.
func (h *Holding) WaitCancelled(t testing.TB, what string, d time.Duration) {
	t.Helper()
	select {
	case <-h.Done:
	case <-time.After(d):
		t.Fatalf("%s: fn's ctx was not cancelled within %v", what, d)
	}
	if !errors.Is(h.Cause, ormlock.ErrLockLost) {
		t.Errorf("%s: fn's ctx cause %v, want ErrLockLost", what, h.Cause)
	}
}

// WaitReturned waits up to d for Session to return and checks its error
// is ErrLockLost.
func (h *Holding) WaitReturned(t testing.TB, what string, d time.Duration) {
	t.Helper()
	select {
	case err := <-h.Err:
		if !errors.Is(err, ormlock.ErrLockLost) {
			t.Errorf("%s: Session returned %v, want ErrLockLost", what, err)
		}
	case <-time.After(d):
		t.Errorf("%s: Session did not return within %v after the loss", what, d)
	}
}
