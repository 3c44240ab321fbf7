package ormlock

import (
	"time"

	"github.com/ormlock/ormlock/internal/sched"
)

// Cron parses expr with robfig/cron v3's standard parser, the one gocron v2's
// CronJob(expr, false) and robfig/cron's cron.New() use ("minute hour
// day-of-month month day-of-week", names, descriptors, and a "CRON_TZ=Zone "
// prefix, which overrides loc), and returns its schedule in loc (nil means
// UTC). "@every d" means [Every](d). Errors wrap [ErrInvalidArgument] and
// carry robfig/cron's message; an expression that can never fire is rejected
// too. Dialect, daylight saving and the slot search: docs/SCHEDULES.md (Cron).
func Cron(expr string, loc *time.Location) (Schedule, error) {
	return schedule(sched.Cron(ErrInvalidArgument, "ormlock.Cron", expr, loc, false))
}

// CronSeconds is [Cron] for the dialect with a leading seconds field, as
// gocron.CronJob(expr, true) parses it (and cron.WithSeconds(), which
// requires the seconds field):
//
//	second minute hour day-of-month month day-of-week
//
// A five-field expression is accepted too, with seconds 0, as gocron does.
func CronSeconds(expr string, loc *time.Location) (Schedule, error) {
	return schedule(sched.Cron(ErrInvalidArgument, "ormlock.CronSeconds", expr, loc, true))
}
