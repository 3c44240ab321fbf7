package conformance_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

// TestHolderOwner: HolderInfo.Owner after WithOwner, per verb and server,
// as HolderInfo.Owner's documentation lists it. PostgreSQL (PgBouncer too):
// a Session of any shape (and on shared lock connections) names its owner;
// a Transaction does not, its Owner being the connection's own
// application_name. MySQL/MariaDB: no Session or Transaction records one;
// a Session that writes the owners row (ormlock run --owner) names it for
// each lock it holds: its key, each key of a set, its semaphore slot. (A
// Lead's owner: TestConformanceLead.)
func TestHolderOwner(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		tbl := testdb.TableName(t, "own")
		t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + tbl + lockproto.OwnersTableSuffix) })
		r := a.with(t, k, ormlock.WithLedgerTable(tbl))
		ctx := context.Background()
		ks := uniq(t, "key", "a", "b", "sem", "shared")
		const owner = "owner of " + "it"
		pg := k.Dialect() == "postgres"
		ownerRow := func(c *config.Config) { c.OwnerRow = true }

		// check runs fn while key is held by verb (Session, or Transaction
		// when tx) with opts, and checks the Owner of every holder Holders
		// reports: want, or the connection's application_name when want
		// is "".
		check := func(what string, key ormlock.Key, tx bool, want string, opts ...ormlock.Option) {
			t.Helper()
			look := func() error {
				hs, err := holders(ctx, r, key)
				if err != nil {
					return err
				}
				if len(hs) == 0 {
					return fmt.Errorf("%s: no holder", what)
				}
				for _, h := range hs {
					if want != "" && h.Owner != want || want == "" && (h.Owner == owner || h.Owner != h.Application) {
						t.Errorf("%s: Owner %q (application %q), want %q", what, h.Owner, h.Application, want)
					}
				}
				return nil
			}
			opts = append(opts, ormlock.WithOwner(owner))
			var err error
			if tx {
				err = r.Transaction(ctx, key, func(txn) error { return look() }, opts...)
			} else {
				err = r.Session(ctx, key, func(context.Context) error { return look() }, opts...)
			}
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		session := ""
		if pg {
			session = owner
		}
		check("Session", ormlock.Name(ks[0]), false, session)
		check("Session of a set", ormlock.All(ks[1], ks[2]), false, session)
		check("Session of a semaphore", ormlock.Semaphore(ks[3], 3), false, session)
		if k != testdb.PgBouncer { // shared connections need session-level locks
			check("Session on shared connections", ormlock.Name(ks[4]), false, session, ormlock.WithSharedLockConns(1))
		}
		check("Transaction", ormlock.Name(ks[0]), true, "")
		check("Transaction of a semaphore", ormlock.Semaphore(ks[3], 3), true, "")
		if !pg {
			check("Session with the owners row", ormlock.Name(ks[0]), false, owner, ownerRow)
			check("Session of a set with the owners row", ormlock.All(ks[1], ks[2]), false, owner, ownerRow)
			check("Session of a semaphore with the owners row", ormlock.Semaphore(ks[3], 3), false, owner, ownerRow)
			check("Session on shared connections with the owners row", ormlock.Name(ks[4]), false, owner, ownerRow, ormlock.WithSharedLockConns(1))
			// the release deleted the rows: a later holder on the same
			// connection that writes none is not shown with this owner
			var left int
			if err := testdb.AdminDB(t, k).QueryRow("SELECT COUNT(*) FROM "+tbl+lockproto.OwnersTableSuffix).Scan(&left); err != nil {
				t.Fatal(err)
			}
			if left != 0 {
				t.Errorf("%d owner rows left after every holder released its lock, want 0", left)
			}
			check("Session after the owners row's holder", ormlock.Name(ks[0]), false, "", ormlock.WithSharedLockConns(1))
			check("Session of a set after the owners row's holder", ormlock.All(ks[1], ks[2]), false, "")
		}
	})
}
