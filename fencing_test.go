package ormlock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ormlock/ormlock"
)

type result int64

func (r result) LastInsertId() (int64, error) { return 0, nil }
func (r result) RowsAffected() (int64, error) {
	if r < 0 {
		return 0, errors.New("no count")
	}
	return int64(r), nil
}

func TestCheckFenced(t *testing.T) {
	failed := errors.New("statement failed")
	if err := ormlock.CheckFenced(result(1), nil); err != nil {
		t.Errorf("one row: %v", err)
	}
	if err := ormlock.CheckFenced(result(0), nil); !errors.Is(err, ormlock.ErrStaleToken) {
		t.Errorf("no row: %v", err)
	}
	if err := ormlock.CheckFenced(nil, failed); !errors.Is(err, failed) {
		t.Errorf("failed statement: %v", err)
	}
	if err := ormlock.CheckFenced(result(-1), nil); err == nil || errors.Is(err, ormlock.ErrStaleToken) {
		t.Errorf("no row count: %v", err)
	}
}

func TestFencingTokenAbsent(t *testing.T) {
	if _, ok := ormlock.FencingToken(context.Background()); ok {
		t.Error("token in a bare context")
	}
}
