package errs_test

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/ormlock/ormlock/internal/errs"
)

func TestWrapKeepsOnePrefix(t *testing.T) {
	inner := errs.Wrap(io.EOF, "read %s", "x")
	outer := errs.Wrap(inner, "Transaction on %q", "k")
	if got, want := outer.Error(), `ormlock: Transaction on "k": read x: EOF`; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if !errors.Is(outer, io.EOF) {
		t.Fatal("errors.Is does not see the wrapped error")
	}
	sentinel := errors.New("ormlock: lock lost")
	if got, want := errs.Wrap(sentinel, "commit").Error(), "ormlock: commit: lock lost"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if errs.Wrap(nil, "x") != nil {
		t.Fatal("Wrap(nil) is not nil")
	}
}

func TestJoinOneLine(t *testing.T) {
	a, b := context.DeadlineExceeded, errors.New("ormlock: COMMIT: EOF")
	j := errs.Join(a, b)
	if got, want := j.Error(), "context deadline exceeded; COMMIT: EOF"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if !errors.Is(j, a) || !errors.Is(j, b) {
		t.Fatal("Join hides a side from errors.Is")
	}
	if errs.Join(nil, b) != b || errs.Join(a, nil) != a || errs.Join(nil, nil) != nil {
		t.Fatal("Join does not drop a nil side")
	}
}
