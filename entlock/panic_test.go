package entlock_test

import (
	"context"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/enttest/ent"
	"github.com/ormlock/ormlock/internal/testdb"
)

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
