package entlock

import (
	"context"
	"fmt"
	"time"

	"github.com/ormlock/ormlock"
)

// RunScheduled is [RunOnce] for the slot of the current time under
// schedule: RunOnce(ctx, client, job, schedule.Slot(time.Now()), fn,
// opts...), the form that cannot get the slot wrong (see
// gormlock.RunScheduled). A nil schedule is an error wrapping
// [ormlock.ErrInvalidArgument].
func RunScheduled[T TxLike](ctx context.Context, client interface {
	Tx(context.Context) (T, error)
}, job string, schedule ormlock.Schedule, fn func(tx T) error, opts ...ormlock.Option) error {
	if schedule == nil {
		return fmt.Errorf("%w: entlock.RunScheduled: nil schedule", ormlock.ErrInvalidArgument)
	}
	return RunOnce(ctx, client, job, schedule.Slot(time.Now()), fn, opts...)
}
