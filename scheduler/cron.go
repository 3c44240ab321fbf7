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

// JobWrapper returns a robfig/cron v3 JobWrapper that runs every firing of
// the job it wraps at most once per slot across all the instances that
// share the database: each firing maps the time it fires (see [WithClock])
// to its slot under schedule and runs the job through the Backend's RunOnce
// ([gormlock.RunOnce] or [entlock.RunOnce]) in claim mode for (job, slot). An instance that fires while another runs
// the slot ([ormlock.ErrNotAcquired]), or after it has run
// ([ormlock.ErrAlreadyDone]), skips the firing; [WithCronLogger] logs that
// at Info. Any other error (the database unreachable, the ledger table
// missing, a lost lock, the job's own error when it is a [JobFunc]) goes to
// the error handler ([WithErrorHandler]).
//
// job names the job in the ledger and in the lock key: the same on every
// instance, distinct between jobs. schedule must describe the same times as
// the cron spec the job is added with, e.g. for
//
//	c := cron.New(cron.WithLocation(berlin))
//	c.AddJob("0 0 * * *", cron.NewChain(w).Then(job))
//
// it is ormlock.Cron("0 0 * * *", berlin); with cron.WithSeconds() it is
// [ormlock.CronSeconds], and for "@every 90s" it is ormlock.Cron("@every
// 90s", nil) (or [ormlock.Every]), whose windows are anchored to the Unix
// epoch so that replicas started at different times agree.
//
// Chains: put the wrapper innermost, next to the job
// (cron.NewChain(cron.Recover(logger), w).Then(job)), so that the lock is
// held exactly while the job runs and a [JobFunc] is recognized. A panic in
// the job marks the slot 'failed', releases the lock and goes on up the
// chain. Runs use context.Background(): robfig/cron gives jobs no context,
// and cron.Stop waits for running jobs.
//
// Options: [WithErrorHandler], [WithCronLogger], [WithClock],
// [WithExclusive], [WithPrune]. Bad input (an invalid job name, a nil
// schedule, an invalid Backend or option) is an error wrapping
// [ormlock.ErrInvalidArgument] that names it. The wrapper returned with it
// fails closed: it never runs the job, and hands that error to the error
// handler at every firing, so a caller that ignored the error runs nothing
// rather than runs unlocked.
func JobWrapper(b Backend, job string, schedule ormlock.Schedule, opts ...Option) (cron.JobWrapper, error) {
	const verb = "scheduler.JobWrapper"
	cfg, cfgErr := newConfig(opts)
	err := b.check(verb)
	if err == nil {
		err = validJob("JobWrapper", job)
	}
	if err == nil && schedule == nil {
		err = fmt.Errorf("%w: %s: nil schedule", ormlock.ErrInvalidArgument, verb)
	}
	if err == nil {
		err = cfgErr
	}
	if err != nil {
		return func(cron.Job) cron.Job {
			return cron.FuncJob(func() { cfg.report(err) })
		}, err
	}
	return func(j cron.Job) cron.Job {
		return cron.FuncJob(func() {
			slot := schedule.Slot(cfg.now())
			// A cancellable context, never cancelled before the run ends:
			// ormlock bounds its detached releases by a timeout only
			// for contexts that can end (it passes a Background one
			// through unchanged).
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ran := false
			err := cfg.claim(ctx, b, job, slot, func(ctx context.Context) error {
				ran = true
				if f, ok := j.(JobFunc); ok {
					return f(ctx)
				}
				j.Run()
				return nil
			})
			switch {
			case err == nil:
			case skipped(err) && !ran:
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
