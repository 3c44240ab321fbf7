package ormlock

import (
	"time"

	"github.com/ormlock/ormlock/internal/sched"
)

// Cron parses expr with robfig/cron v3's standard parser — the one
// gocron v2's CronJob(expr, false) and robfig/cron's cron.New() use — and
// returns its schedule in loc (nil means UTC):
//
//	minute hour day-of-month month day-of-week
//
// Everything that parser accepts is accepted, with its meaning: lists,
// ranges, steps and names (JAN-DEC, SUN-SAT; day-of-week 0-6); a day-of-month
// or day-of-week field that begins with * or ? places no restriction, but
// "*/2" does, and when both day fields restrict, a day matches if either
// does ("0 0 */2 * 1" is odd days and Mondays); the descriptors @yearly,
// @annually, @monthly, @weekly, @daily, @midnight and @hourly; and a
// "CRON_TZ=Zone " or "TZ=Zone " prefix, which overrides loc as it overrides
// gocron's scheduler location. "@every d" is accepted too and means
// [Every](d) on elapsed time (d rounded down to whole seconds, at least 1s,
// as robfig/cron does): robfig/cron fires it d after the job was added, at
// a different phase on every replica, and the fixed grid is what makes those
// firings agree.
//
// The scheduled times are robfig/cron's firing times, with the rules of
// [Schedule] where its clock arithmetic skips or repeats a wall time: when
// the clocks go back, robfig/cron fires a repeated wall time twice and the
// second firing maps to the first (it finds the slot done); when they go
// forward, robfig/cron skips a wall time that does not exist, and its slot
// is the instant the clocks jump. A test checks this firing for firing
// against robfig/cron over two years in zones with daylight saving. (gocron
// v2 fires a repeated wall time once itself, and with its
// DaylightSavingsTimeRunAfterTransition policy fires a skipped one after the
// jump, which maps to the jump's slot.) In a zone whose clocks move by 30
// minutes (Australia/Lord_Howe), robfig/cron v3.0.1 steps hours as elapsed
// time and, after a change, may fire up to 30 minutes late (the firing maps
// to the time it was for) or miss a scheduled time (its slot is never
// triggered).
//
// Errors wrap [ErrInvalidArgument] and carry robfig/cron's message. One
// deviation: an expression that can never fire ("0 0 30 2 *"), which
// robfig/cron accepts and never runs, is rejected.
//
// Why robfig/cron's parser itself: a second parser would drift from the one
// the schedulers run (an earlier one here did, costing most runs of
// "0 0 */2 * 1"), and robfig/cron v3 is small and has no dependencies. The
// slot search (the latest scheduled time at or before a trigger, on wall
// clocks) is ormlock's own, since robfig/cron only searches forward.
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
