package entlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent/item"
)

func TestTransactionNested(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		client, _ := openEnt(t, k)
		owner := enttest.Owner(t, k)
		key := "nested-" + t.Name()
		boom := errors.New("boom")
		err := entlock.Transaction(ctx, client, key, func(tx *ent.Tx) error {
			if err := insert(ctx, tx, owner, 1); err != nil {
				return err
			}
			// the transactional client cannot start a transaction: refused
			// as the other verbs refuse it
			called := false
			err := entlock.Transaction(ctx, tx.Client(), key+"-inner", func(*ent.Tx) error { called = true; return nil })
			if !errors.Is(err, ormlock.ErrInvalidArgument) || called || !strings.Contains(err.Error(), "within a transaction") {
				return fmt.Errorf("tx.Client(): err=%v called=%v, want ErrInvalidArgument with ent's error and fn not called", err, called)
			}
			// the same key on the plain client is another connection: not re-entrant
			err = entlock.Transaction(ctx, client, key, func(*ent.Tx) error { called = true; return nil })
			if !errors.Is(err, ormlock.ErrNotAcquired) || called {
				return fmt.Errorf("same key: err=%v called=%v, want ErrNotAcquired", err, called)
			}
			start := time.Now()
			err = entlock.Transaction(ctx, client, key, func(*ent.Tx) error { called = true; return nil }, ormlock.WithWait(300*time.Millisecond))
			if !errors.Is(err, ormlock.ErrNotAcquired) || called {
				return fmt.Errorf("same key with wait: err=%v called=%v, want ErrNotAcquired", err, called)
			}
			t.Logf("nested same-key wait gave up after %v", time.Since(start))
			// another key: an independent transaction that commits on its own
			if err := entlock.Transaction(ctx, client, key+"-other", func(inner *ent.Tx) error {
				return insert(ctx, inner, owner, 2)
			}); err != nil {
				return fmt.Errorf("other key: %w", err)
			}
			return boom
		})
		if err != boom {
			t.Fatalf("outer err = %v, want boom", err)
		}
		n, err := client.Item.Query().Where(item.Owner(owner)).Only(ctx)
		if err != nil || n.N != 2 {
			t.Fatalf("rows: %v %v, want only the inner transaction's row (n=2)", n, err)
		}
	})
}

// Bad input only entlock can get; what every adapter can get is
// TestTransactionBadInput in internal/conformance.
func TestTransactionBadInput(t *testing.T) {
	ctx := context.Background()
	var nilCtx context.Context
	client, _ := openEnt(t, testdb.Postgres)
	called := false
	fn := func(*ent.Tx) error { called = true; return nil }
	for _, c := range []struct {
		name string
		err  error
		want error
		text string
	}{
		{"nil ctx", entlock.Transaction(nilCtx, client, "k", fn), ormlock.ErrInvalidArgument, "nil context"},
		{"nil client", entlock.Transaction(ctx, (*ent.Client)(nil), "k", fn), ormlock.ErrInvalidArgument, "nil client"},
	} {
		if !errors.Is(c.err, c.want) || !strings.Contains(c.err.Error(), c.text) || !strings.HasPrefix(c.err.Error(), "ormlock: ") {
			t.Errorf("%s: err = %v, want %v mentioning %q", c.name, c.err, c.want, c.text)
		}
	}
	if called {
		t.Error("fn called on bad input")
	}
}

// txPanics is a client whose Tx panics after the Driver began the locked
// transaction, as a layer between the verb and the Driver (a hook, a
// wrapper) might.
type txPanics struct{ c *ent.Client }

func (p txPanics) Tx(ctx context.Context) (*ent.Tx, error) {
	if _, err := p.c.Tx(ctx); err != nil {
		return nil, err
	}
	panic("client.Tx: after the driver")
}

// A panic between the lock and fn still releases the lock and the
// connection.
func TestPanicAfterLockReleases(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		client, sqlDB := openEnt(t, k)
		tbl := ledgerTable(t, k, client)
		name := "panic-after-lock-" + t.Name()
		for _, verb := range []string{"Transaction", "RunOnce"} {
			func() {
				defer func() {
					if p := recover(); p == nil {
						t.Errorf("%s: no panic", verb)
					}
				}()
				if verb == "Transaction" {
					_ = entlock.Transaction(context.Background(), txPanics{client}, name, func(*ent.Tx) error { return nil })
				} else {
					_ = entlock.RunOnce(context.Background(), txPanics{client}, name, testdb.Slot(0), func(*ent.Tx) error { return nil }, ormlock.WithLedgerTable(tbl))
				}
			}()
			testdb.AssertNoLeaks(t, k, sqlDB)
		}
	})
}
