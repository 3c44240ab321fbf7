package entlock_test

import (
	"context"
	"testing"

	"entgo.io/ent/dialect"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent"
)

// TestFencingTokenShapes checks what only entlock has: the token read with
// entlock.FencingToken from the dialect.Tx given when the verb is called on
// the Driver, and forgotten once fn returns. The verbs' tokens themselves
// are TestFencingVerbs in internal/conformance.
func TestFencingTokenShapes(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		drv, client, _ := openDriver(t, k)
		tbl := ormlock.WithLedgerTable(ledgerTable(t, k, client))
		key := "ent-fence-" + string(k)
		var kept *ent.Tx
		var first int64
		err := entlock.Transaction(ctx, client, key, func(tx *ent.Tx) error {
			var ok bool
			if first, ok = entlock.FencingToken(tx); !ok {
				t.Error("Transaction: no token")
			}
			kept = tx
			return nil
		}, tbl, ormlock.WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := entlock.FencingToken(kept); ok {
			t.Error("token still found after fn returned")
		}
		err = entlock.Transaction(ctx, drv, key, func(tx dialect.Tx) error {
			if tok, ok := entlock.FencingToken(tx); !ok || tok <= first {
				t.Errorf("on the Driver: token %d (ok %v), last %d", tok, ok, first)
			}
			return nil
		}, tbl, ormlock.WithFencing())
		if err != nil {
			t.Fatal(err)
		}
	})
}
