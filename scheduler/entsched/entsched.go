// Package entsched is the ent backend of the scheduler adapters: pass
// [Backend] to scheduler.NewLocker, scheduler.NewElector or
// scheduler.JobWrapper. It is a package of its own so that an ent program
// links no GORM (see the scheduler package's Decisions).
//
//	client := ent.NewClient(ent.Driver(entlock.Wrap(drv)))
//	locker, err := scheduler.NewLocker(entsched.Backend(client, ormlock.WithOwner(hostname)), midnight)
package entsched

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/schedhook"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/internal/backend"
)

// Backend returns the scheduler Backend on an ent client built on
// [entlock.Wrap] (or on the *entlock.Driver itself): runs go through
// [entlock.RunScheduled] in claim mode, leadership through
// [entlock.Lead]; opts apply on top of Wrap's defaults. The ledger rows
// and lock keys are gormsched's, so replicas on either ORM share the runs. A
// scheduler.JobFunc run through it (and a gocron task wrapped by
// scheduler.Locker.Task) gets the run's context, [entlock.Context] of its
// claim-mode transaction, as the other backends' do: held, with the slot,
// under the hook's context, ended with cause [ormlock.ErrLockLost] on a
// loss. See docs/SCHEDULES.md (Backends).
func Backend[T entlock.TxLike](client interface {
	Tx(context.Context) (T, error)
}, opts ...ormlock.Option) scheduler.Backend {
	const name = "entsched.Backend"
	if client == nil || isNilPointer(client) {
		return backend.Failed(fmt.Errorf("%w: %s: nil client", ormlock.ErrInvalidArgument, name))
	}
	return backend.New(opts, backend.Funcs{
		Scheduled: func(ctx context.Context, job string, s ormlock.Schedule, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
			return entlock.RunScheduled(ctx, client, job, s, func(tx T) error {
				// the run's context, which ent's fn gets through its tx
				rctx := entlock.Context(tx)
				if _, ok := ormlock.Slot(rctx); !ok { // unreachable: a *ent.Tx is comparable
					slot, _ := entlock.Slot(tx)
					rctx = schedhook.WithSlot(ctx, slot)
				}
				return fn(rctx)
			}, opts...)
		},
		Session: func(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
			return entlock.Session(ctx, client, key, fn, opts...)
		},
		Lead: func(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
			return entlock.Lead(ctx, client, key, fn, opts...)
		},
		Prune: func(ctx context.Context, olderThan time.Duration, opts ...ormlock.Option) (int64, error) {
			return entlock.Prune(ctx, client, olderThan, opts...)
		},
	})
}

func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
