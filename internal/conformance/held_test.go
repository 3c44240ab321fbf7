package conformance_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// lockCtx is the context fn's work uses, the one ormlock.Held reads:
// gormlock's tx.Statement.Context, sqllock's and pgxlock's fn ctx, and
// entlock.Context(tx) (ent's fn gets no context).
func lockCtx(tx txn) context.Context {
	if e, ok := tx.(entTx); ok {
		return entlock.Context(e.tx)
	}
	return tx.Context()
}

// TestHeld: ormlock.Held is true while fn runs with the lock held, in every
// verb of every adapter on every server, and false for a context no verb
// made, after the verb returned, and once a Session's lock is lost (its
// backend killed); entlock.Held(tx) is its twin on ent's transaction.
func TestHeld(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		var none context.Context // a nil context says no
		if ormlock.Held(ctx) || ormlock.Held(none) {
			t.Fatal("Held of a context no verb made")
		}
		r := openRunner(t, a, k)
		key := "conf-held-" + t.Name()
		var after context.Context
		if err := r.Transaction(ctx, key, func(tx txn) error {
			after = lockCtx(tx)
			if !ormlock.Held(after) {
				t.Error("Transaction: Held is false in fn")
			}
			if e, ok := tx.(entTx); ok && !entlock.Held(e.tx) {
				t.Error("Transaction: entlock.Held is false in fn")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if ormlock.Held(after) {
			t.Error("Transaction: Held is true after the verb returned")
		}
		if err := r.Session(ctx, key, func(ctx context.Context) error {
			after = ctx
			if !ormlock.Held(ctx) {
				t.Error("Session: Held is false in fn")
			}
			// a nested verb answers for its own lock, and the outer
			// one's context still says held
			return r.Session(ctx, key+"-inner", func(inner context.Context) error {
				if !ormlock.Held(inner) || !ormlock.Held(ctx) {
					t.Error("nested Session: Held is false")
				}
				return nil
			})
		}); err != nil {
			t.Fatal(err)
		}
		if ormlock.Held(after) {
			t.Error("Session: Held is true after the verb returned")
		}
		if ld, ok := r.(leader); ok {
			lctx, cancel := context.WithCancel(ctx)
			err := ld.Lead(lctx, key, func(ctx context.Context) error {
				after = ctx
				if !ormlock.Held(ctx) {
					t.Error("Lead: Held is false in fn")
				}
				cancel()
				return nil
			})
			cancel()
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("Lead: %v", err)
			}
			if ormlock.Held(after) {
				t.Error("Lead: Held is true after the verb returned")
			}
		}
		tbl := ledgerTable(t, k, r)
		for _, claim := range []bool{false, true} {
			opts := []ormlock.Option{ormlock.WithLedgerTable(tbl)}
			if claim {
				opts = append(opts, ormlock.WithClaim())
			}
			if err := r.RunOnce(ctx, "held-"+t.Name(), testdb.Slot(map[bool]int{false: 0, true: 1}[claim]), func(tx txn) error {
				if !ormlock.Held(lockCtx(tx)) {
					t.Errorf("RunOnce (claim %v): Held is false in fn", claim)
				}
				return nil
			}, opts...); err != nil {
				t.Fatal(err)
			}
		}

		// a lost lock: Held says no once fn's context ends
		lost := "conf-held-lost-" + t.Name()
		err := r.Session(ctx, lost, func(ctx context.Context) error {
			if !ormlock.Held(ctx) {
				t.Error("Session before the loss: Held is false")
			}
			if err := killHolder(ctx, t, k, r, lost); err != nil {
				return err
			}
			if err := awaitLoss(ctx); err != nil && ctx.Err() == nil {
				return err
			}
			if ormlock.Held(ctx) {
				t.Error("Session after the loss: Held is true")
			}
			return nil
		}, ormlock.WithKeepalive(200*time.Millisecond))
		if !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("lost Session: %v, want ErrLockLost", err)
		}
	})
}
