package entlock_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"entgo.io/ent/dialect"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/enttest/ent"
	"github.com/ormlock/ormlock/internal/testdb"
)

// TestFencingVerbs checks that ent's verbs hand fn a token greater than the
// last one of its key: read from the generated *ent.Tx (or the dialect.Tx
// given when the verb is called on the Driver) with entlock.FencingToken,
// and from a Session's ctx; that the token is forgotten once fn returns;
// and that the counter is the fence table's row (namespace, "name:"+key),
// which gormlock shares.
func TestFencingVerbs(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		drv, client, _ := openDriver(t, k)
		tbl := ormlock.WithLedgerTable(ledgerTable(t, k, client))
		t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + ledgerName(t, "e") + "_fence") })
		key := "ent-fence-" + string(k)
		last := int64(0)
		next := func(what string) func(int64, bool) {
			return func(tok int64, ok bool) {
				t.Helper()
				if !ok || tok <= last {
					t.Errorf("%s: token %d (ok %v), last %d", what, tok, ok, last)
				}
				last = tok
			}
		}
		var kept *ent.Tx
		errFail := errors.New("roll back")
		for i, fail := range []bool{false, true, false} {
			err := entlock.Transaction(ctx, client, key, func(tx *ent.Tx) error {
				next("Transaction")(entlock.FencingToken(tx))
				kept = tx
				if fail {
					return errFail
				}
				return nil
			}, tbl, ormlock.WithFencing())
			if fail && !errors.Is(err, errFail) || !fail && err != nil {
				t.Fatalf("Transaction %d: %v", i, err)
			}
		}
		if _, ok := entlock.FencingToken(kept); ok {
			t.Error("token still found after fn returned")
		}
		err := entlock.Transaction(ctx, client, key, func(tx *ent.Tx) error {
			next("REPEATABLE READ")(entlock.FencingToken(tx))
			return nil
		}, tbl, ormlock.WithFencing(), ormlock.WithTxOptions(&sql.TxOptions{Isolation: sql.LevelRepeatableRead}))
		if err != nil {
			t.Fatal(err)
		}
		err = entlock.Transaction(ctx, drv, key, func(tx dialect.Tx) error {
			next("on the Driver")(entlock.FencingToken(tx))
			return nil
		}, tbl, ormlock.WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		err = entlock.Session(ctx, client, key, func(ctx context.Context) error {
			next("Session")(ormlock.FencingToken(ctx))
			return nil
		}, tbl, ormlock.WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		if err := entlock.Transaction(ctx, client, key, func(tx *ent.Tx) error {
			if _, ok := entlock.FencingToken(tx); ok {
				t.Error("token without WithFencing")
			}
			return nil
		}, tbl); err != nil {
			t.Fatal(err)
		}

		var stored int64
		q := "SELECT token FROM " + ledgerName(t, "e") + "_fence WHERE namespace = '' AND lock_key = ?"
		if k.Dialect() == "postgres" {
			q = strings.Replace(q, "?", "$1", 1)
		}
		if err := testdb.AdminDB(t, k).QueryRow(q, "name:"+key).Scan(&stored); err != nil || stored != last {
			t.Errorf("fence row of %q: token %d (%v), want %d", key, stored, err, last)
		}

		job := "ent-fence-job-" + string(k)
		last = 0
		for i, claim := range []bool{false, true, false} {
			opts := []ormlock.Option{tbl, ormlock.WithFencing()}
			if claim {
				opts = append(opts, ormlock.WithClaim())
			}
			err := entlock.RunOnce(ctx, client, job, slotAt(i), func(tx *ent.Tx) error {
				next("RunOnce")(entlock.FencingToken(tx))
				return nil
			}, opts...)
			if err != nil {
				t.Fatalf("RunOnce %d: %v", i, err)
			}
		}
	})
}
