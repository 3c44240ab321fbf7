package conformance_test

import (
	"context"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// HeldFor counts from the acquisition, not from the start of the lock
// transaction: a Session that waited on the server (WithWait, as a Lead's
// campaign does) for over a second reports, from its first moment on and
// after its keepalives, no more than the time since it got the lock (plus
// slack), whatever the wait before it.
func TestHolderHeldForExcludesTheWait(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		ctx := context.Background()
		key := "heldfor-" + a.name + "-" + string(k)
		const wait = 1500 * time.Millisecond
		const slack = 500 * time.Millisecond

		heldA, releaseA := make(chan struct{}), make(chan struct{})
		errA := make(chan error, 1)
		go func() {
			errA <- r.Session(ctx, key, func(context.Context) error {
				close(heldA)
				<-releaseA
				return nil
			})
		}()
		<-heldA

		heldB, releaseB := make(chan time.Time, 1), make(chan struct{})
		errB := make(chan error, 1)
		go func() {
			errB <- r.Session(ctx, key, func(context.Context) error {
				heldB <- time.Now()
				<-releaseB
				return nil
			}, ormlock.WithWait(time.Minute), ormlock.WithKeepalive(100*time.Millisecond))
		}()
		// B waits on the server, inside its lock transaction
		deadline := time.Now().Add(10 * time.Second)
		for {
			h, err := r.Holder(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if h.Waiters == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("B does not wait: %s", h)
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(wait)
		close(releaseA)
		if err := <-errA; err != nil {
			t.Fatal(err)
		}
		acquired := <-heldB
		check := func(when string) {
			t.Helper()
			h, err := r.Holder(ctx, key)
			since := time.Since(acquired)
			if err != nil || !h.Held {
				t.Fatalf("%s: Holder = %s, %v", when, h, err)
			}
			if h.HeldFor <= 0 || h.HeldFor > since+slack {
				t.Errorf("%s: held_for=%v, %v after the acquisition, which came after a wait of over %v: %s", when, h.HeldFor, since, wait, h)
			}
		}
		check("at once")
		time.Sleep(350 * time.Millisecond) // past a few keepalives
		check("after keepalives")
		close(releaseB)
		if err := <-errB; err != nil {
			t.Fatal(err)
		}
	})
}
