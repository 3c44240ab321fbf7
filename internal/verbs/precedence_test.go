package verbs_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/verbs"
)

// binder is a handle, nil when null, whose own error is err; its pool is
// never reached by the checks under test (steps 1 to 7 send nothing).
type binder struct {
	null bool
	err  error
}

func (b binder) Nil() string {
	if b.null {
		return "handle"
	}
	return ""
}

func (b binder) Bind(_ context.Context, _ string, opts []config.Option) (verbs.Pool, error) {
	if b.err != nil {
		return verbs.Pool{}, b.err
	}
	return verbs.Pool{Pkg: "test", Dialect: lockproto.Postgres, Cfg: config.New(opts...)}, nil
}

// TestErrorPrecedence: when several checks fail, the first in the
// package's order wins: a nil context, a nil handle, a nil fn, an invalid
// argument, the handle's error, an invalid option, a bad key, an ended
// context. Each case makes its own fault and every later one.
func TestErrorPrecedence(t *testing.T) {
	handleErr := fmt.Errorf("%w: test.Transaction: the plugin failed", errs.ErrUnsupportedDialect)
	optErr := errors.New("ormlock: invalid option")
	argErr := fmt.Errorf("%w: test: bad slot", errs.ErrInvalidArgument)
	badOpt := func(c *config.Config) { c.Fail(optErr) }
	ended, cancel := context.WithCancel(context.Background())
	cancel()

	type call struct {
		ctx  context.Context
		b    binder
		opts []config.Option
		args verbs.Args
		key  keys.Key
	}
	all := func() call { // every fault but a nil context
		return call{ctx: ended, b: binder{null: true, err: handleErr}, opts: []config.Option{badOpt}, args: verbs.Args{NilFn: true, Err: argErr}, key: keys.Name("")}
	}
	// each step clears the fault of the case before it
	clear := []func(c *call){
		func(c *call) {},
		func(c *call) { c.b.null = false },
		func(c *call) { c.args.NilFn = false },
		func(c *call) { c.args.Err = nil },
		func(c *call) { c.b.err = nil },
		func(c *call) { c.opts = nil },
		func(c *call) { c.key = keys.Name("k") },
	}
	upTo := func(n int) func() call {
		return func() call {
			c := all()
			for _, f := range clear[:n+1] {
				f(&c)
			}
			return c
		}
	}
	cases := []struct {
		name  string
		call  func() call
		check func(error) bool
	}{
		{"nil context", func() call { c := all(); c.ctx = nil; return c }, func(err error) bool {
			return errors.Is(err, errs.ErrInvalidArgument) && err.Error() == "ormlock: invalid argument: test.Transaction: nil context"
		}},
		{"a nil handle", upTo(0), func(err error) bool {
			return errors.Is(err, errs.ErrInvalidArgument) && err.Error() == "ormlock: invalid argument: test.Transaction: nil handle"
		}},
		{"a nil fn", upTo(1), func(err error) bool {
			return errors.Is(err, errs.ErrInvalidArgument) && err.Error() == "ormlock: invalid argument: test.Transaction: nil fn"
		}},
		{"an invalid argument", upTo(2), func(err error) bool { return errors.Is(err, argErr) }},
		{"the handle's error", upTo(3), func(err error) bool { return errors.Is(err, handleErr) }},
		{"an invalid option", upTo(4), func(err error) bool { return errors.Is(err, optErr) }},
		{"a bad key", upTo(5), func(err error) bool { return errors.Is(err, errs.ErrInvalidKey) }},
		{"an ended context", upTo(6), func(err error) bool {
			return errors.Is(err, errs.ErrNotAcquired) && errors.Is(err, context.Canceled)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.call()
			_, op, err := verbs.Prepare(c.ctx, c.b, "test", "Transaction", c.key, c.opts, c.args, true, lockproto.HeldForTx)
			if op != nil || !tc.check(err) {
				t.Fatalf("got op %v, error %v; want %s first", op, err, tc.name)
			}
		})
	}
	// a verb that takes no lock for its caller returns the context's error
	// alone
	_, _, err := verbs.Prepare(ended, binder{}, "test", "Holder", keys.Name("k"), nil, verbs.Args{}, false, lockproto.HeldForHolder)
	if !errors.Is(err, context.Canceled) || errors.Is(err, errs.ErrNotAcquired) {
		t.Fatalf("Holder on an ended context: %v", err)
	}
}

// TestLockPrecedence: Lock (sqllock's and pgxlock's, in the caller's
// transaction) refuses the options it cannot honour there in step 5, after
// the handle's error and an invalid option, before a bad key and an ended
// context; all of them before anything is sent (the binder's pool has no
// transaction to send it on).
func TestLockPrecedence(t *testing.T) {
	handleErr := fmt.Errorf("%w: test.Lock: the handle failed", errs.ErrUnsupportedDialect)
	optErr := errors.New("ormlock: invalid option")
	badOpt := func(c *config.Config) { c.Fail(optErr) }
	fencing := func(c *config.Config) { c.Fencing = true }
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		b    binder
		opts []config.Option
		key  keys.Key
		want func(error) bool
	}{
		{"the handle's error", binder{err: handleErr}, []config.Option{badOpt, fencing}, keys.Name(""), func(err error) bool { return errors.Is(err, handleErr) }},
		{"an invalid option", binder{}, []config.Option{badOpt, fencing}, keys.Name(""), func(err error) bool { return errors.Is(err, optErr) }},
		{"an option Lock refuses", binder{}, []config.Option{fencing}, keys.Name(""), func(err error) bool {
			return errors.Is(err, errs.ErrInvalidArgument) && strings.Contains(err.Error(), "test.Lock: WithFencing")
		}},
		{"a bad key", binder{}, nil, keys.Name(""), func(err error) bool { return errors.Is(err, errs.ErrInvalidKey) }},
		{"an ended context", binder{}, nil, keys.Name("k"), func(err error) bool {
			return errors.Is(err, errs.ErrNotAcquired) && errors.Is(err, context.Canceled)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := verbs.Lock(ended, tc.b, "test", tc.key, tc.opts); !tc.want(err) {
				t.Fatalf("got %v; want %s first", err, tc.name)
			}
		})
	}
	var noCtx context.Context
	if err := verbs.Lock(noCtx, binder{null: true}, "test", keys.Name(""), nil); !errors.Is(err, errs.ErrInvalidArgument) || !strings.Contains(err.Error(), "nil context") {
		t.Fatalf("nil context: %v", err)
	}
	if err := verbs.Lock(ended, binder{null: true}, "test", keys.Name(""), nil); !errors.Is(err, errs.ErrInvalidArgument) || !strings.Contains(err.Error(), "nil handle") {
		t.Fatalf("nil handle: %v", err)
	}
}
