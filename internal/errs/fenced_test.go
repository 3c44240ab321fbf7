package errs_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/ormlock/ormlock/internal/errs"
)

func TestCheckFenced(t *testing.T) {
	rows := func(n int64, err error) func() (int64, error) {
		return func() (int64, error) { return n, err }
	}
	never := func() (int64, error) { t.Fatal("rows called after a failed statement"); return 0, nil }
	if err := errs.CheckFenced(io.EOF, never); err != io.EOF {
		t.Errorf("failed statement: %v, want it unchanged", err)
	}
	if err := errs.CheckFenced(nil, rows(0, nil)); !errors.Is(err, errs.ErrStaleToken) || strings.Count(err.Error(), "ormlock: ") != 1 {
		t.Errorf("no row changed: %v, want ErrStaleToken", err)
	}
	if err := errs.CheckFenced(nil, rows(0, io.ErrUnexpectedEOF)); !errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, errs.ErrStaleToken) {
		t.Errorf("rows unknown: %v", err)
	}
	if err := errs.CheckFenced(nil, rows(1, nil)); err != nil {
		t.Errorf("one row changed: %v", err)
	}
}

// A refusal names the MySQL/MariaDB cause (no clientFoundRows=true in the
// DSN) where the server may be one, and only there.
func TestCheckOnNamesTheDSNCause(t *testing.T) {
	none := func() (int64, error) { return 0, nil }
	for _, c := range []struct {
		dialect string
		dsn     bool
	}{{"postgres", false}, {"mysql", true}, {"", true}} {
		err := errs.CheckFencedOn(c.dialect, nil, none)
		if !errors.Is(err, errs.ErrStaleToken) {
			t.Fatalf("%q: %v, want ErrStaleToken", c.dialect, err)
		}
		msg := err.Error()
		if got := strings.Contains(msg, "clientFoundRows=true"); got != c.dsn {
			t.Errorf("%q: names clientFoundRows %v: %s", c.dialect, got, msg)
		}
		if !strings.Contains(msg, "the row does not exist") || strings.Count(msg, "(") != strings.Count(msg, ")") {
			t.Errorf("%q: %s", c.dialect, msg)
		}
	}
}
