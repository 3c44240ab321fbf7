package gormlock_test

import (
	"context"
	"testing"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/gormtest"
	"github.com/ormlock/ormlock/internal/testdb"
)

// BenchmarkFencing measures what WithFencing adds to an acquisition: the
// same empty Transaction and Session with and without a fencing token, side
// by side in one run (docs/BENCHMARKS.md, Fencing):
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
