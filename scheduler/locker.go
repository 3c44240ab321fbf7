package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/ormlock/ormlock"
)

// Locker is a gocron v2 distributed locker (gocron.WithDistributedLocker or
// gocron.WithDistributedJobLocker) with RunOnce semantics: across all the
// schedulers that share the database, each scheduled run of a job happens
// once, however far apart their clocks and start times are.
//
// gocron calls Lock(ctx, job name) before every run and skips the run when
// Lock returns an error; after the run it calls Unlock. Lock maps the time
// of the call (see [WithClock]) to the run's slot with the job's schedule
// ([WithJobSchedule], else the Locker's default) and claims (job, slot) the
// way [gormlock.RunOnce] does in claim mode ([ormlock.WithClaim]): it takes
// the lock [ormlock.RunKey](job, slot) on a dedicated connection, commits a
// 'running' row in the ledger, and holds both until Unlock, which marks the
// row 'done' and releases the lock. So:
//
//   - An instance whose trigger comes while another runs the slot gets
//     [ormlock.ErrNotAcquired], and one whose trigger comes after the run has
//     finished gets [ormlock.ErrAlreadyDone]: gocron skips the run either
//     way. A plain mutex on the job name would let that late instance run
//     the job a second time.
//   - A trigger up to [ormlock.SlotTolerance] early (at most half the
//     period) counts for the scheduled time it precedes, so skewed clocks
//     agree on the slot (see [ormlock.Schedule]).
//
// The ledger row is marked 'done' at Unlock whatever the job returned:
// gocron does not tell the locker how the job ended. A job that must be
// retried within its slot when it fails should call [gormlock.RunOnce]
// itself.
//
// Errors: Lock returns ErrAlreadyDone and ErrNotAcquired (skips, not
// reported) and any other error (the database unreachable, the ledger table
// missing — create it with gormlock.Migrate) as RunOnce returned it; gocron
// hands them to its AfterLockError event listener. Other errors also go to
// the error handler ([WithErrorHandler]), and so do the errors of Unlock,
// which gocron discards: a release that failed, or a lock lost while the job
// ran (the error wraps [ormlock.ErrLockLost]).
//
// Contexts: gocron passes the job's context to Lock and Unlock; it is
// cancelled when the job is removed or the scheduler shuts down, possibly
// while the job runs. The lock attempt honours it (a claim it cuts short is
// a skip: ErrNotAcquired wrapping the context's cause, not reported), but once the run has
// started the hold does not depend on it, and Unlock ignores its context
// altogether: the ledger update and the release run to completion (bounded
// by ormlock's own timeouts), so a shutdown never leaves a 'running' row or
// a held lock behind.
//
// The job name is the one gocron passes (gocron.WithName; by default the
// function's name): it must be the same on every replica, and it names the
// job in the ledger (at most 191 characters).
//
// A Locker is safe for concurrent use: gocron may run several jobs, and
// several runs of one job, at once.
type Locker struct {
	b   Backend
	def ormlock.Schedule
	cfg config
	err error // the constructor's error: every Lock returns it
}

var _ gocron.Locker = (*Locker)(nil)

// NewLocker returns a Locker on b whose jobs run on schedule unless
// [WithJobSchedule] gives a job its own. schedule is normally the gocron
// job's own schedule written for ormlock: [ormlock.Cron] with the same
// expression and time zone as gocron.CronJob(expr, false),
// [ormlock.CronSeconds] for gocron.CronJob(expr, true), or [ormlock.Every]
// (nil location) for a gocron.DurationJob.
//
// Options: [WithJobSchedule], [WithErrorHandler], [WithClock],
// [WithExclusive], [WithPrune]. Bad input (a nil schedule, an invalid
// Backend or option) is an error wrapping [ormlock.ErrInvalidArgument] that
// names it. The Locker returned with it fails closed: every Lock returns
// that error (and reports it) without taking a lock, so a caller that
// ignored the error runs nothing rather than runs unlocked.
func NewLocker(b Backend, schedule ormlock.Schedule, opts ...Option) (*Locker, error) {
	const verb = "scheduler.NewLocker"
	cfg, cfgErr := newConfig(opts)
	err := b.check(verb)
	switch {
	case err != nil:
	case schedule == nil:
		err = fmt.Errorf("%w: %s: nil schedule", ormlock.ErrInvalidArgument, verb)
	default:
		err = cfgErr
	}
	if err != nil {
		return &Locker{cfg: cfg, err: err}, err
	}
	return &Locker{b: b, def: schedule, cfg: cfg}, nil
}

func (l *Locker) schedule(job string) ormlock.Schedule {
	if s, ok := l.cfg.jobs[job]; ok {
		return s
	}
	return l.def
}

// Lock claims the current slot of job for this instance, and holds it until
// the returned lock's Unlock. It returns an error wrapping
// [ormlock.ErrAlreadyDone] when the slot has been run,
// [ormlock.ErrNotAcquired] when another instance is running it (or, with
// [WithExclusive], running the job) or when ctx ended before the run was
// claimed (the error wraps ctx's cause too), and any other error when the
// run could not be claimed; gocron then skips the run.
func (l *Locker) Lock(ctx context.Context, job string) (gocron.Lock, error) {
	if err := l.usable(); err != nil {
		if l != nil && l.err != nil {
			l.cfg.report(err)
		}
		return nil, err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	slot := l.schedule(job).Slot(l.cfg.now())
	h := &heldRun{job: job, slot: slot, cfg: &l.cfg, b: l.b, release: make(chan struct{}), done: make(chan error, 1)}
	started := make(chan struct{})

	// The attempt honours ctx; the hold, once the slot is claimed, does
	// not: ctx is gocron's job context, which a shutdown cancels while the
	// job may still run, and gocron calls Unlock after the job in any case.
	hctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	detach := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	go func() {
		defer cancel(nil)
		h.done <- l.cfg.claim(hctx, l.b, job, slot, func(context.Context) error {
			if !detach() {
				// ctx ended while the slot was being claimed: do not
				// start a run that gocron will not make; the row is
				// marked failed, so a later trigger may run the slot.
				return wrapf(context.Cause(ctx), "job %q: gocron's context ended before the run started", job)
			}
			close(started)
			<-h.release
			return nil
		})
	}()
	select {
	case <-started:
		return h, nil
	case err := <-h.done:
		if err == nil { // unreachable: fn always starts or fails
			err = errors.New("ormlock: scheduler: the run ended before it started")
		}
		if cause := context.Cause(ctx); cause != nil && !errors.Is(err, ormlock.ErrAlreadyDone) {
			// gocron's context ended (shutdown, a removed job) while the
			// run was being claimed: a skip, whatever the claim's own
			// error says, wrapping the context's cause.
			switch {
			case !errors.Is(err, ormlock.ErrNotAcquired):
				err = fmt.Errorf("%w: %w (%s)", ormlock.ErrNotAcquired, cause, strings.TrimPrefix(err.Error(), "ormlock: "))
			case !errors.Is(err, cause):
				err = fmt.Errorf("%w (%w)", err, cause)
			}
		}
		err = wrapf(err, "job %q, slot %s", job, slot.Format(time.RFC3339Nano))
		if !skipped(err) {
			l.cfg.report(err)
		}
		return nil, err
	}
}

// usable returns why l cannot take locks: a nil or zero Locker, or the
// constructor's error.
func (l *Locker) usable() error {
	const verb = "scheduler.Locker"
	switch {
	case l == nil:
		return fmt.Errorf("%w: %s: nil Locker (build one with scheduler.NewLocker)", ormlock.ErrInvalidArgument, verb)
	case l.err != nil:
		return l.err
	case l.def == nil:
		if err := l.b.check(verb); err != nil {
			return err
		}
		return fmt.Errorf("%w: %s: zero Locker (build one with scheduler.NewLocker)", ormlock.ErrInvalidArgument, verb)
	}
	return l.b.check(verb)
}

// heldRun is a claimed (job, slot) held for gocron until Unlock.
type heldRun struct {
	job     string
	slot    time.Time
	cfg     *config
	b       Backend
	release chan struct{}
	done    chan error
	once    sync.Once
	err     error
}

// Unlock marks the run's ledger row 'done' and releases its lock, whatever
// ctx says (see [Locker]). It returns RunOnce's error, if any (a lost lock
// wraps [ormlock.ErrLockLost]), also handed to the error handler, since
// gocron ignores it. Calling it again returns the same error.
func (h *heldRun) Unlock(context.Context) error {
	h.once.Do(func() {
		close(h.release)
		if err := <-h.done; err != nil {
			h.err = wrapf(err, "job %q, slot %s", h.job, h.slot.Format(time.RFC3339Nano))
			h.cfg.report(h.err)
		}
		h.cfg.afterRun(h.b)
	})
	return h.err
}
