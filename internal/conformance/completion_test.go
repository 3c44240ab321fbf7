package conformance_test

import (
	"context"
	"testing"

	"github.com/ormlock/ormlock/internal/enttest"
	"github.com/ormlock/ormlock/internal/testdb"
)

// TestMySQLCompletionType: with completion_type=2 (COMMIT AND RELEASE:
// the server closes the connection after COMMIT) a committed Transaction
// is never reported as failed, and with completion_type=1 (COMMIT AND
// CHAIN: a new transaction begins at once) no connection goes back to the
// pool inside a transaction; with a context that can end and one that
// cannot.
func TestMySQLCompletionType(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			k := testdb.MariaDB
			enttest.Migrate(t, k)
			owner := enttest.Owner(t, k)
			n := 0
			for _, ct := range []string{"1", "2"} {
				db := openWith(t, k, "completion_type="+ct)
				db.SetMaxOpenConns(1) // the next statement runs on the Transaction's connection
				r := a.on(t, k.Dialect(), db)
				for _, cancellable := range []bool{false, true} {
					ctx := context.Background()
					if cancellable {
						var cancel context.CancelFunc
						ctx, cancel = context.WithCancel(ctx)
						defer cancel()
					}
					n++
					err := r.Transaction(ctx, "completion-"+a.name+"-"+ct, func(tx txn) error {
						return tx.Insert(owner, n)
					})
					if err != nil {
						t.Errorf("completion_type=%s, cancellable context %v: %v", ct, cancellable, err)
					}
					var rows int
					if err := testdb.AdminDB(t, k).QueryRow("SELECT COUNT(*) FROM items WHERE owner = ? AND n = ?", owner, n).Scan(&rows); err != nil || rows != 1 {
						t.Errorf("completion_type=%s, cancellable context %v: %d rows committed (%v), want 1", ct, cancellable, rows, err)
					}
					var inTx int
					if err := db.QueryRow("SELECT @@in_transaction").Scan(&inTx); err != nil || inTx != 0 {
						t.Errorf("completion_type=%s, cancellable context %v: the pool's connection is in a transaction (%d, %v)", ct, cancellable, inTx, err)
					}
				}
				closeChecked(t, k, db)
			}
		})
	}
}
