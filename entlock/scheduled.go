package entlock

import (
	"context"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/ledger"
)

// RunScheduled is [RunOnce] for the slot of the current time under
// schedule: RunOnce(ctx, client, job, schedule.Slot(time.Now()), fn,
// opts...), the form that cannot get the slot wrong (see
// gormlock.RunScheduled). With [ormlock.WithCatchUp] it first runs the
// missed slots of the window; fn reads the slot it runs with [Slot](tx). A
// nil schedule is an error wrapping [ormlock.ErrInvalidArgument]. See
// docs/SCHEDULES.md (Catch-up of missed slots).
func RunScheduled[T TxLike](ctx context.Context, client interface {
	Tx(context.Context) (T, error)
}, job string, schedule ormlock.Schedule, fn func(tx T) error, opts ...ormlock.Option) error {
	const verb = "RunScheduled"
	if err := checkCall(ctx, verb, client, opts); err != nil {
		return err
	}
	return ledger.Scheduled(ctx, "entlock."+verb, job, schedule, func() (ledger.Reader, error) { return readerOf(ctx, verb, client, opts, nil) },
		func(slot time.Time) error { return RunOnce(ctx, client, job, slot, fn, opts...) })
}
