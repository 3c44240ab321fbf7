package gormlock

import (
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
)

// RunScheduled is [RunOnce] for the slot of the current time under
// schedule: RunOnce(db, job, schedule.Slot(time.Now()), fn, opts...). It
// is the form that cannot get the slot wrong: every instance that fires for
// the same scheduled time, a little early or late, passes the same slot,
// which a slot taken from the trigger's own clock would not (see
// [ormlock.Schedule]). A nil schedule is an error wrapping
// [ormlock.ErrInvalidArgument].
func RunScheduled(db *gorm.DB, job string, schedule ormlock.Schedule, fn func(tx *gorm.DB) error, opts ...ormlock.Option) error {
	if schedule == nil {
		return fmt.Errorf("%w: gormlock.RunScheduled: nil schedule", ormlock.ErrInvalidArgument)
	}
	return RunOnce(db, job, schedule.Slot(time.Now()), fn, opts...)
}
