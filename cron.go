package ormlock

import (
	"time"

	"github.com/ormlock/ormlock/internal/sched"
)

// Cron parses expr with robfig/cron v3's own parser and returns its
// schedule in loc (nil means UTC). Five fields ("minute hour day-of-month
// month day-of-week") are the standard dialect of gocron v2's
// CronJob(expr, false) and robfig/cron's cron.New(); six fields ("second
// minute hour day-of-month month day-of-week") are the seconds dialect of
// CronJob(expr, true) and cron.WithSeconds(). The two never overlap, since
// the standard dialect refuses six fields, and a five-field expression
// fires at second 0 in both. Names, descriptors ("@daily") and a
// "CRON_TZ=Zone " prefix, which overrides loc, are accepted; "@every d"
// means [Every](d). Errors wrap [ErrInvalidArgument] and carry
// robfig/cron's message; an expression that can never fire is rejected too.
// Dialect, daylight saving and the slot search: docs/SCHEDULES.md (Cron).
func Cron(expr string, loc *time.Location) (Schedule, error) {
	return schedule(sched.Cron("ormlock.Cron", expr, loc, true))
}
