package gormlock

import (
	"context"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/ledger"
)

// RunScheduled is [RunOnce] for the slot of the current time under
// schedule: RunOnce(db, job, schedule.Slot(time.Now()), fn, opts...). It
// is the form that cannot get the slot wrong: every instance that fires for
// the same scheduled time, a little early or late, passes the same slot,
// which a slot taken from the trigger's own clock would not (see
// [ormlock.Schedule]). With [ormlock.WithCatchUp] it first runs the missed
// slots of the window; fn reads the slot it runs with
// ormlock.Slot(tx.Statement.Context). A nil schedule is an error wrapping
// [ormlock.ErrInvalidArgument]. See docs/SCHEDULES.md (Catch-up of missed
// slots).
func RunScheduled(db *gorm.DB, job string, schedule ormlock.Schedule, fn func(tx *gorm.DB) error, opts ...ormlock.Option) error {
	const verb = "gormlock.RunScheduled"
	return ledger.Scheduled(ctxOf0(db), verb, job, schedule, func() (ledger.Reader, error) { return readerOf(db, verb, opts, nil) },
		func(slot time.Time) error { return RunOnce(db, job, slot, fn, opts...) })
}

// ctxOf0 is ctxOf for a db that may be nil.
func ctxOf0(db *gorm.DB) context.Context {
	if db == nil {
		return nil
	}
	return ctxOf(db)
}
