package gormlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	"gorm.io/gorm/utils/tests"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/gormtest"
	"github.com/ormlock/ormlock/internal/testdb/leakcheck"
)

// Bad input only gormlock can get: a nil *gorm.DB, a call inside a
// transaction where none may be, a dialect GORM has and ormlock does not.
// What every adapter can get is tested in internal/conformance (the
// TestXBadInput of each verb).

// Bad input only gormlock can get; the rest is TestTransactionBadInput in
// internal/conformance.
func TestSessionBadInput(t *testing.T) {
	leakcheck.Goroutines(t, testdb.Postgres)
	called := false
	fn := func(context.Context) error { called = true; return nil }
	check := func(what string, err, want error, text string) {
		t.Helper()
		if !errors.Is(err, want) || !strings.Contains(err.Error(), text) {
			t.Errorf("%s: err = %v, want %v mentioning %q", what, err, want, text)
		}
		if !strings.HasPrefix(err.Error(), "ormlock: ") {
			t.Errorf("%s: error %q lacks the \"ormlock: \" prefix", what, err)
		}
	}
	check("nil db", gormlock.Session(nil, "k", fn), ormlock.ErrInvalidArgument, "nil *gorm.DB")
	if called {
		t.Error("fn called on bad input")
	}
}

// Bad input only gormlock can get; what every adapter can get is
// TestTransactionBadInput in internal/conformance.
func TestTransactionBadInput(t *testing.T) {
	called := false
	fn := func(*gorm.DB) error { called = true; return nil }
	if err := gormlock.Transaction(nil, "k", fn); !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "nil *gorm.DB") {
		t.Errorf("nil db: %v", err)
	}
	if called {
		t.Error("fn called on bad input")
	}
}

// Bad input only gormlock can get; the rest is TestRunOnceBadInput in
// internal/conformance.
func TestRunOnceBadInput(t *testing.T) {
	called := false
	fn := func(*gorm.DB) error { called = true; return nil }
	slot := testdb.Slot(0)
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"nil db", gormlock.RunOnce(nil, "j", slot, fn), "nil *gorm.DB"},
		{"nil db Migrate", gormlock.Migrate(nil), "nil *gorm.DB"},
	}
	for _, c := range cases {
		if !errors.Is(c.err, ormlock.ErrInvalidArgument) || !strings.Contains(c.err.Error(), c.want) || !strings.HasPrefix(c.err.Error(), "ormlock: ") {
			t.Errorf("%s: %v, want ErrInvalidArgument mentioning %q", c.name, c.err, c.want)
		}
	}
	if called {
		t.Error("fn called on bad input")
	}
}

// Runs refuses a nil db (the rest of Runs is in internal/conformance).
func TestRunsNilDB(t *testing.T) {
	if _, err := gormlock.Runs(nil, "job", 5); !errors.Is(err, ormlock.ErrInvalidArgument) {
		t.Errorf("nil db: %v", err)
	}
}

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

// Bad input only gormlock can get; the rest is TestHolderBadInput in
// internal/conformance.
func TestHolderBadInput(t *testing.T) {
	if _, err := gormlock.Holder(nil, "k"); !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "gormlock.Holder") {
		t.Errorf("nil db: %v", err)
	}
	dummy, err := gorm.Open(tests.DummyDialector{}, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gormlock.Holder(dummy, "k"); !errors.Is(err, ormlock.ErrUnsupportedDialect) {
		t.Errorf("dummy dialect: %v", err)
	}
}
