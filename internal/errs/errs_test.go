package errs_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strings"
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

func TestRolledBack(t *testing.T) {
	fnErr := errors.New("fn failed")
	ctx := context.Background()
	for _, rerr := range []error{nil, sql.ErrTxDone, fmt.Errorf("wrapped: %w", sql.ErrTxDone)} {
		if got := errs.RolledBack(ctx, fnErr, rerr); got != fnErr {
			t.Errorf("rollback %v: %v, want fn's error unchanged", rerr, got)
		}
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if got := errs.RolledBack(ended, fnErr, io.EOF); got != fnErr {
		t.Errorf("rollback after the context ended: %v, want fn's error unchanged", got)
	}
	inner := errors.New("ormlock: bad connection")
	got := errs.RolledBack(ctx, fnErr, inner)
	if !errors.Is(got, fnErr) || !errors.Is(got, inner) {
		t.Fatalf("%v: want both errors reachable", got)
	}
	if want := "fn failed (ormlock: rollback failed: bad connection)"; got.Error() != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// sqlStateErr stands for a driver's error with a SQLSTATE (pgconn.PgError,
// pq.Error).
type sqlStateErr struct{ code, msg string }

func (e *sqlStateErr) Error() string    { return e.msg + " (SQLSTATE " + e.code + ")" }
func (e *sqlStateErr) SQLState() string { return e.code }

// A prepared statement clash (42P05, 26000) gets the pooler hint once,
// however many layers wrap it; other errors get none.
func TestPoolerHint(t *testing.T) {
	for _, c := range []struct {
		err  error
		hint bool
	}{
		{&sqlStateErr{"42P05", `ERROR: prepared statement "stmtcache_dc4b" already exists`}, true},
		{&sqlStateErr{"26000", `ERROR: prepared statement "stmtcache_dc4b" does not exist`}, true},
		{&sqlStateErr{"26000", `ERROR: unnamed prepared statement does not exist`}, true},
		{&sqlStateErr{"42P01", `ERROR: relation "x" does not exist`}, false},
		{errors.New("prepared statement trouble"), false},
	} {
		err := errs.Wrap(errs.Mark(errs.ErrInvalidArgument, errs.Wrap(c.err, "inner"), "middle"), "outer")
		msg := err.Error()
		if n := strings.Count(msg, errs.PoolerHint); n != map[bool]int{true: 1}[c.hint] {
			t.Errorf("%v: the hint %d times in %q", c.err, n, msg)
		}
		if c.hint && !strings.Contains(msg, "default_query_exec_mode=simple_protocol") {
			t.Errorf("%q names no fix", msg)
		}
		if !errors.Is(err, c.err) {
			t.Errorf("%q does not match its cause", msg)
		}
	}
}
