package scheduler

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
)

// Ent returns the Backend on an ent client built on [entlock.Wrap] (or on
// the *entlock.Driver itself): runs go through [entlock.RunOnce] in claim
// mode ([ormlock.WithClaim], added to opts) and leadership through
// [entlock.Session]. opts apply on top of the defaults given to
// entlock.Wrap. The ledger rows and lock keys are the ones [GORM] uses, so
// replicas on either ORM share the runs.
//
// One difference from GORM: entlock.RunOnce gives a claim-mode job its
// (lazily begun) transaction, not the lock's context, so a [JobFunc] run
// through an Ent backend gets the context of the firing
// (context.Background()), which a lost lock does not cancel; the loss is
// still reported when the job returns. The job's transaction is not used
// (it is never begun).
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
