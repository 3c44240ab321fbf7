package fencectx_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/ormlock/ormlock/internal/fencectx"
)

func TestCheck(t *testing.T) {
	rows := func(n int64, err error) func() (int64, error) {
		return func() (int64, error) { return n, err }
	}
	never := func() (int64, error) { t.Fatal("rows called after a failed statement"); return 0, nil }
	if err := fencectx.Check(io.EOF, never); err != io.EOF {
		t.Errorf("failed statement: %v, want it unchanged", err)
	}
	if err := fencectx.Check(nil, rows(0, nil)); !errors.Is(err, fencectx.ErrStaleToken) || strings.Count(err.Error(), "ormlock: ") != 1 {
		t.Errorf("no row changed: %v, want ErrStaleToken", err)
	}
	if err := fencectx.Check(nil, rows(0, io.ErrUnexpectedEOF)); !errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, fencectx.ErrStaleToken) {
		t.Errorf("rows unknown: %v", err)
	}
	if err := fencectx.Check(nil, rows(1, nil)); err != nil {
		t.Errorf("one row changed: %v", err)
	}
}
