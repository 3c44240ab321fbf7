package gormlock_test

import (
	"context"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/gormtest"
)

// fenceLedger creates the test's own ledger and fence tables with Migrate
// and drops both after the test; it returns the option naming them.
func fenceLedger(t *testing.T, k testdb.Kind, db *gorm.DB) ormlock.Option {
	t.Helper()
	name := testdb.Table(t, k, "f")
	if err := gormlock.Migrate(db, ormlock.WithLedgerTable(name)); err != nil {
		t.Fatalf("Migrate(%s): %v", name, err)
	}
	return ormlock.WithLedgerTable(name)
}

// TestFencingNested (gormlock's nested transactions) checks a lock taken in a savepoint of an open
// transaction (PostgreSQL): its token is committed on another connection,
// so it survives the outer transaction's rollback.
func TestFencingNested(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			db, _ := gormtest.Open(t, k)
			tbl := fenceLedger(t, k, db)
			key := "fence-nested-" + string(k)
			var inner int64
			errOuter := errors.New("outer rolls back")
			err := db.Transaction(func(outer *gorm.DB) error {
				if err := gormlock.Transaction(outer, key, func(tx *gorm.DB) error {
					inner, _ = gormlock.FencingToken(tx)
					return nil
				}, tbl, ormlock.WithFencing()); err != nil {
					return err
				}
				return errOuter
			})
			if !errors.Is(err, errOuter) {
				t.Fatalf("outer: %v", err)
			}
			if inner < 1 {
				t.Fatalf("nested token %d", inner)
			}
			var after int64
			if err := gormlock.Transaction(db, key, func(tx *gorm.DB) error {
				after, _ = gormlock.FencingToken(tx)
				return nil
			}, tbl, ormlock.WithFencing()); err != nil {
				t.Fatal(err)
			}
			if after <= inner {
				t.Fatalf("token after the outer rollback %d <= %d", after, inner)
			}
		})
	}
}

// BenchmarkFencing measures what WithFencing adds to an acquisition: the
// same empty Transaction and Session with and without a fencing token, side
// by side in one run (docs/BENCHMARKS.md, go test -bench: Fencing):
//
//	go test -run '^$' -bench BenchmarkFencing -benchmem -count 6 ./gormlock/
func BenchmarkFencing(b *testing.B) {
	for _, k := range testdb.Kinds() {
		b.Run(string(k), func(b *testing.B) {
			sqlDB := testdb.Open(b, k)
			db := gormtest.On(b, k.Dialect(), sqlDB)
			name := "fence-" + b.Name()
			tbl := ormlock.WithLedgerTable(testdb.Table(b, k, "bench_fence"))
			if err := gormlock.Migrate(db, tbl); err != nil {
				b.Fatal(err)
			}
			noop := func(*gorm.DB) error { return nil }
			noctx := func(context.Context) error { return nil }
			for _, c := range []struct {
				name string
				opts []ormlock.Option
			}{{"plain", nil}, {"fenced", []ormlock.Option{tbl, ormlock.WithFencing()}}} {
				b.Run("Transaction/"+c.name, func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						if err := gormlock.Transaction(db, name, noop, c.opts...); err != nil {
							b.Fatal(err)
						}
					}
				})
				b.Run("Session/"+c.name, func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						if err := gormlock.Session(db, name, noctx, c.opts...); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}
