package gormlock_test

import (
	"errors"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/gormtest"
	"github.com/ormlock/ormlock/internal/testdb"
)

// Bad input only gormlock can get; the rest is TestPruneBadInput in
// internal/conformance.
func TestPruneBadInput(t *testing.T) {
	db, _ := gormtest.Open(t, testdb.Postgres)
	if _, err := gormlock.Prune(nil, time.Hour); !errors.Is(err, ormlock.ErrInvalidArgument) {
		t.Errorf("nil db: %v", err)
	}
	err := db.Transaction(func(tx *gorm.DB) error {
		_, err := gormlock.Prune(tx, time.Hour)
		return err
	})
	if !errors.Is(err, ormlock.ErrInvalidArgument) {
		t.Errorf("inside a transaction: %v", err)
	}
}
