package gormlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/leakcheck"
	"github.com/ormlock/ormlock/internal/testdb"
)

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
