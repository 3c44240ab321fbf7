package gormlock_test

import (
	"context"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/gormtest"
	"github.com/ormlock/ormlock/internal/testdb"
)

// TestCheckServerNestedOnePool: the first call on a pool, nested in a
// transaction of a pool with a single connection, asks its question through
// that transaction rather than waiting for a second connection.
func TestCheckServerNestedOnePool(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			db, sqlDB := gormtest.Open(t, k) // a new pool: nothing cached yet
			sqlDB.SetMaxOpenConns(1)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			ran := false
			err := db.WithContext(ctx).Transaction(func(outer *gorm.DB) error {
				return gormlock.Transaction(outer, "nested-onepool-"+string(k), func(*gorm.DB) error { ran = true; return nil })
			})
			if err != nil || !ran {
				t.Fatalf("nested Transaction on a one-connection pool: err=%v ran=%v", err, ran)
			}
		})
	}
}
