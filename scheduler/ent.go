package scheduler

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
)

// Ent returns the Backend on an ent client built on [entlock.Wrap] (or on the
// *entlock.Driver itself): runs go through [entlock.RunOnce] in claim mode,
// leadership through [entlock.Session]; opts apply on top of Wrap's defaults.
// The ledger rows and lock keys are [GORM]'s, so replicas on either ORM share
// the runs. A [JobFunc] run through it gets the firing's context, which a
// lost lock does not cancel (the loss is still reported). See
// docs/SCHEDULES.md (Backends: GORM and Ent).
func Ent[T entlock.TxLike](client interface {
	Tx(context.Context) (T, error)
}, opts ...ormlock.Option) Backend {
	const name = "scheduler.Ent"
	if client == nil || isNilPointer(client) {
		return Backend{err: fmt.Errorf("%w: %s: nil client", ormlock.ErrInvalidArgument, name)}
	}
	if err := checkOptions(opts); err != nil {
		return Backend{err: err}
	}
	runOpts := append(opts[:len(opts):len(opts)], ormlock.WithClaim())
	return Backend{
		runOnce: func(ctx context.Context, job string, slot time.Time, fn func(ctx context.Context) error) error {
			return entlock.RunOnce(ctx, client, job, slot, func(T) error { return fn(ctx) }, runOpts...)
		},
		session: func(ctx context.Context, key string, fn func(ctx context.Context) error, extra ...ormlock.Option) error {
			return entlock.Session(ctx, client, key, fn, append(opts[:len(opts):len(opts)], extra...)...)
		},
		prune: func(ctx context.Context, olderThan time.Duration) (int64, error) {
			return entlock.Prune(ctx, client, olderThan, opts...)
		},
	}
}

func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
