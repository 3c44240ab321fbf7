package conformance_test

import (
	"context"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

// A Lead term's probe for the controls table, on every server: a ledger
// without one (Migrate not run since the upgrade) answers "none" without
// an error, so nothing more is read and the server logs nothing; a
// migrated one answers "present" with the server's clock, and a key never
// asked to resign reads as none asked.
func TestResignProbe(t *testing.T) {
	for _, k := range testdb.Kinds() {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			db := testdb.Open(t, k)
			d, err := lockproto.DialectOf(k.Dialect())
			if err != nil {
				t.Fatal(err)
			}
			reader := func(table string) *ledger.ResignReader {
				op, err := lockproto.NewOp(d, "Lead", keys.Name("probe-"+t.Name()), config.New(ormlock.WithLedgerTable(table)))
				if err != nil {
					t.Fatal(err)
				}
				return ledger.NewResignReader(db, op)
			}
			ctx := context.Background()
			if _, ok, err := reader(testdb.TableName(t, "none")).Probe(ctx); ok || err != nil {
				t.Fatalf("Probe of a ledger without a controls table = %v, %v; want none, no error", ok, err)
			}
			tbl := testdb.Table(t, k, "c")
			if err := ormlockMigrate(ctx, t, k, tbl); err != nil {
				t.Fatal(err)
			}
			r := reader(tbl)
			now, ok, err := r.Probe(ctx)
			if !ok || err != nil || now.Location() != time.UTC || time.Since(now).Abs() > time.Minute {
				t.Fatalf("Probe of a migrated ledger = %v, %v, %v; want present and the server's clock in UTC", now, ok, err)
			}
			if _, asked, err := r.Asked(ctx); asked || err != nil {
				t.Fatalf("Asked of a key never asked = %v, %v", asked, err)
			}
		})
	}
}

// ormlockMigrate runs sqllock's Migrate of ledger table tbl on kind k.
func ormlockMigrate(ctx context.Context, t *testing.T, k testdb.Kind, tbl string) error {
	t.Helper()
	for _, a := range adapters {
		if a.name == "sqllock" {
			return openRunner(t, a, k).Migrate(ctx, ormlock.WithLedgerTable(tbl))
		}
	}
	t.Fatal("no sqllock adapter")
	return nil
}
