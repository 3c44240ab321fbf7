package gormlock_test

import (
	"context"
	"testing"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/gormtest"
)

// BenchmarkTransaction compares gormlock.Transaction (empty fn) with a
// hand-written database/sql version of the same protocol and with a plain
// GORM transaction that takes no lock, side by side in one run:
//
//	go test -run '^$' -bench BenchmarkTransaction -benchmem -count 6 ./gormlock/
func BenchmarkTransaction(b *testing.B) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer, testdb.MariaDB} {
		b.Run(string(k), func(b *testing.B) {
			sqlDB := testdb.Open(b, k)
			db := gormtest.On(b, k.Dialect(), sqlDB)
			name := "bench-" + b.Name()
			noop := func(*gorm.DB) error { return nil }
			testdb.BenchCalls(b, "gormlock", func() error { return gormlock.Transaction(db, name, noop) })
			ctx := context.Background()
			testdb.BenchCalls(b, "handwritten", func() error { return testdb.Handwritten(ctx, k, sqlDB, name) })
			testdb.BenchCalls(b, "gorm-no-lock", func() error { return db.Transaction(noop) })
		})
	}
}
