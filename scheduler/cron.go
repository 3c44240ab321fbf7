package scheduler

import (
	"context"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/ormlock/ormlock"
)

// JobFunc is a job for robfig/cron that takes a context and returns an
// error. Wrapped by [JobWrapper], it runs with the context of the run's
// lock (cancelled with cause [ormlock.ErrLockLost] if the lock is lost), and
// its error is recorded in the ledger (the slot's row is marked 'failed',
// so a later trigger of the same slot may retry) and handed to the error
// handler. Run, which robfig/cron calls when the job is not wrapped, calls
// it with context.Background() and drops the error.
type JobFunc func(ctx context.Context) error

// Run calls f with context.Background().
func (f JobFunc) Run() { _ = f(context.Background()) }

var _ cron.Job = JobFunc(nil)

// JobWrapper returns a robfig/cron v3 JobWrapper that runs each firing of the
// job it wraps at most once per slot of schedule across all the instances
// that share the database (RunOnce in claim mode for (job, slot)); a firing
// whose slot another instance runs or has run is skipped. schedule must
// describe the cron spec's times (nil: the job's [WithJobSchedule], so that
// a set-up in strict mode names every job's schedule once); put the wrapper
// innermost in a chain. Other
// errors, and a [JobFunc]'s own, go to the error handler; a firing of a job
// an operator paused is a skip too ([ormlock.ErrPaused]), and a slot an
// operator asked to rerun runs at the next firing, after its own slot, by
// another call of the wrapped job (a JobFunc reads it with ormlock.Slot). Bad input wraps
// [ormlock.ErrInvalidArgument], and the wrapper returned with it fails closed
// (it runs nothing). See docs/SCHEDULES.md (JobWrapper (robfig/cron)).
func JobWrapper(b Backend, job string, schedule ormlock.Schedule, opts ...Option) (cron.JobWrapper, error) {
	const verb = "scheduler.JobWrapper"
	cfg, cfgErr := newConfig(opts)
	err := b.Check(verb)
	if err == nil {
		err = validJob("JobWrapper", job)
	}
	if s, ok := cfg.jobs[job]; ok && schedule == nil {
		schedule = s // the job's WithJobSchedule, as a Locker would take it
	}
	if err == nil && schedule == nil {
		err = fmt.Errorf("%w: %s: job %q has no schedule (pass it, or scheduler.WithJobSchedule(%q, ...))", ormlock.ErrInvalidArgument, verb, job, job)
	}
	if err == nil {
		err = cfgErr
	}
	if err == nil {
		err = cfg.checkCatchUp(verb, b, false)
	}
	if err != nil {
		return func(cron.Job) cron.Job {
			return cron.FuncJob(func() { cfg.report(err) })
		}, err
	}
	return func(j cron.Job) cron.Job {
		return cron.FuncJob(func() {
			now := cfg.now()
			slot := schedule.Slot(now)
			if err := cfg.refires.fired(job, slot, schedule); err != nil {
				cfg.report(err)
			}
			// A cancellable context, never cancelled before the run ends:
			// ormlock bounds its detached releases by a timeout only
			// for contexts that can end (it passes a Background one
			// through unchanged).
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ran, failed := false, false
			err := cfg.claim(ctx, b, job, schedule, now, func(ctx context.Context) error {
				ran = true
				if f, ok := j.(JobFunc); ok {
					err := f(ctx)
					failed = failed || err != nil
					return err
				}
				j.Run()
				return nil
			})
			switch {
			case err == nil:
			case skipped(err) && !failed:
				// no slot failed: a skip, also when another slot of the
				// firing ran (a rerun after a slot done elsewhere)
				if cfg.logger != nil {
					cfg.logger.Info("ormlock: skipped", "job", job, "slot", slot.Format(time.RFC3339Nano), "reason", err.Error())
				}
			default:
				cfg.report(wrapf(err, "job %q, slot %s", job, slot.Format(time.RFC3339Nano)))
			}
			if ran {
				cfg.afterRun(b)
			}
		})
	}, nil
}
