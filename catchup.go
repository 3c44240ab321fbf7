package ormlock

import (
	"context"
	"fmt"
	"time"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/sched"
)

// CatchUpPolicy says which missed slots [WithCatchUp] runs. Its String
// method returns "latest" or "all".
type CatchUpPolicy = config.CatchUpPolicy

const (
	// CatchUpLatest runs the newest missed slot only, as Quartz's "fire
	// once now" misfire policy does: right for a job whose run covers
	// everything since the last one (a sync, a report of the current state).
	CatchUpLatest = config.CatchUpLatest
	// CatchUpAll runs every missed slot, oldest first, stopping at the first
	// that fails (its error is returned or reported; the rest are caught up
	// later): right for a job whose runs each cover their own period (a
	// daily settlement).
	CatchUpAll = config.CatchUpAll
)

// WithCatchUp makes RunScheduled (gormlock's, entlock's and the others'),
// the scheduler module's adapters and `ormlock run --once-per` catch up
// missed slots: a slot of the schedule whose scheduled time lies within
// window before now, by the database server's clock, and that has no
// 'done' row in the ledger (a 'running' claim is left to its owner; a
// 'failed' one runs again). At each call, before the current slot,
// RunScheduled runs the newest missed slot ([CatchUpLatest]) or each of
// them, oldest first ([CatchUpAll]); each is claimed as a normal run is, so
// replicas that start together run each once. fn reads the slot it runs
// with [Slot]. The schedule must be made by [Cron] or [Every]. A window
// that is not positive, or an unknown policy, is an error wrapping
// [ErrInvalidArgument]. The default is no catch-up.
//
// Prune cuts by the server's clock too, so the two windows are judged by
// one clock; a Prune configured with this option refuses an olderThan
// shorter than window plus 1 minute. The caller's clock, which picks the
// current slot, may be up to 1 minute from the server's: further apart, a
// call with catch-up returns an error that names the difference, and
// nothing runs. See docs/SCHEDULES.md (Catch-up of missed slots) and
// docs/SCHEDULES.md (Clocks of catch-up and Prune).
func WithCatchUp(window time.Duration, policy CatchUpPolicy) Option {
	return func(c *config.Config) {
		switch {
		case window <= 0:
			c.Fail(fmt.Errorf("%w: WithCatchUp: window must be positive, got %v", ErrInvalidArgument, window))
		case policy != CatchUpLatest && policy != CatchUpAll:
			c.Fail(fmt.Errorf("%w: WithCatchUp: unknown policy %v (CatchUpLatest or CatchUpAll)", ErrInvalidArgument, policy))
		default:
			c.CatchUpWindow, c.CatchUpPolicy = window, policy
		}
	}
}

// Slot returns the slot that a RunOnce or RunScheduled fn runs for, from
// fn's context: gormlock's tx.Statement.Context, the ctx of a claim-mode fn
// or of a scheduler.JobFunc (entlock's fn reads it with entlock.Slot(tx)).
// A caught-up run of yesterday's slot must stamp yesterday's date, not
// today's. ok is false outside such a run.
func Slot(ctx context.Context) (slot time.Time, ok bool) { return sched.SlotFrom(ctx) }
