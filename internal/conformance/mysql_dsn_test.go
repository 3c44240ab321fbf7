package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/enttest"
	"github.com/ormlock/ormlock/internal/testdb"
)

// The MySQL driver's DSN settings that change what the server and driver
// answer, on every adapter over go-sql-driver/mysql: without parseTime the
// ledger's times come back as text; with clientFoundRows an UPDATE counts
// matched rows; with interpolateParams arguments are written into the
// statement text. Fencing, RunOnce, Runs and Prune work the same on each.
func TestMySQLDSNVariants(t *testing.T) {
	k := testdb.MariaDB
	base := testdb.DSN(t, k)
	variants := map[string]string{
		"parseTime off":     strings.Replace(base, "parseTime=true&loc=UTC", "parseTime=false", 1),
		"clientFoundRows":   base + "&clientFoundRows=true",
		"interpolateParams": base + "&interpolateParams=true",
	}
	for _, a := range adapters {
		if !runsOn(a, k) {
			continue
		}
		for name, dsn := range variants {
			t.Run(a.name+"/"+name, func(t *testing.T) {
				enttest.Migrate(t, k)
				db, err := sql.Open("mysql", dsn)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
				t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
				r := a.on(t, k.Dialect(), db)
				ctx := context.Background()
				tbl := testdb.Table(t, k, "s")
				opts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithFencing()}
				if err := r.Migrate(ctx, opts...); err != nil {
					t.Fatalf("Migrate: %v", err)
				}
				key := "dsn-" + t.Name()
				var tokens []int64
				for range 2 {
					err := r.Transaction(ctx, key, func(tx txn) error {
						tok, ok := tx.FencingToken()
						if !ok {
							return errors.New("no fencing token in fn's transaction")
						}
						tokens = append(tokens, tok)
						return nil
					}, opts...)
					if err != nil {
						t.Fatalf("Transaction: %v", err)
					}
				}
				if tokens[1] <= tokens[0] {
					t.Fatalf("tokens %v do not grow", tokens)
				}
				slot := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
				runs := 0
				for range 2 {
					err := r.RunOnce(ctx, "dsn-job", slot, func(txn) error {
						runs++
						return nil
					}, opts...)
					if err != nil && !errors.Is(err, ormlock.ErrAlreadyDone) {
						t.Fatalf("RunOnce: %v", err)
					}
				}
				if runs != 1 {
					t.Fatalf("fn ran %d times for one slot, want 1", runs)
				}
				rs, err := r.Runs(ctx, "dsn-job", 10, opts...)
				if err != nil || len(rs) != 1 || !rs[0].Slot.Equal(slot) || rs[0].Status != "done" {
					t.Fatalf("Runs = %+v, %v; want the one done run of %v", rs, err, slot)
				}
				if n, err := r.Prune(ctx, time.Hour, opts...); err != nil || n != 1 {
					t.Fatalf("Prune = %d, %v; want 1", n, err)
				}
			})
		}
	}
}
