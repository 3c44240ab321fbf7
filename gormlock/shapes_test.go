package gormlock_test

import (
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/gormtest"
)

// A refused set nested in an outer PostgreSQL transaction gives back the
// keys it took: its savepoint is rolled back, and the outer transaction
// goes on.
func TestTransactionNestedSetRefused(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			db, _ := gormtest.Open(t, k)
			a, b := "nested-set-a-"+t.Name(), "nested-set-b-"+t.Name()
			// the set takes a and b in its canonical order: hold whichever
			// comes second, so that the first is taken before the refusal
			for _, held := range []string{a, b} {
				release := testdb.RawHold(t, k, "", held)
				err := db.Transaction(func(outer *gorm.DB) error {
					err := gormlock.Transaction(outer, ormlock.All(a, b), func(*gorm.DB) error {
						t.Error("fn ran without every key")
						return nil
					})
					if !errors.Is(err, ormlock.ErrNotAcquired) {
						t.Errorf("nested All with %s held: %v, want ErrNotAcquired", held, err)
					}
					for _, n := range []string{a, b} {
						if n != held && !rawFree(t, k, n) {
							t.Errorf("%s still held by the refused nested set", n)
						}
					}
					return outer.Exec("SELECT 1").Error // the outer transaction goes on
				})
				if err != nil {
					t.Fatal(err)
				}
				release()
			}
		})
	}
}
