package scheduler

import (
	"context"
	"fmt"
	"time"

	"github.com/ormlock/ormlock"
)

// Task returns fn as a gocron task that runs under the context of its run's
// lock, which gocron's Locker interface cannot hand to a job: pass it to
// gocron.NewTask, with job the name of the gocron job (gocron.WithName):
//
//	s.NewJob(gocron.CronJob("0 0 2 * * *", true), gocron.NewTask(locker.Task("nightly-report", report)),
//		gocron.WithName("nightly-report"))
//
// fn's ctx is the context the run's verb handed its fn, the one the Backend
// gives a [JobFunc]: [ormlock.Held] is true while the lock is held,
// [ormlock.Slot] is the run's slot (a caught-up one too), it derives from
// the context the verb's [ormlock.Hook] Start returned (a tracer's span,
// otelormlock's, parents the job's work), and it ends with cause
// [ormlock.ErrLockLost] when the lock is lost, or with gocron's cause when
// gocron's job context ends (a shutdown, a removed job). fn's error (or
// panic, which goes on to gocron) marks the run's slot 'failed' as
// [Locker.JobFailed] does, for this run even when several of the job are in
// progress, so a wrapped job needs no [Locker.RecordFailures].
//
// fn also runs the slots an operator asked to rerun ([ormlock.Rerun]):
// after a firing's own run, the Locker calls fn for each pending rerun
// (ormlock.Slot(ctx) the rerun's slot), on the claim's goroutine rather
// than gocron's, before the firing's Unlock returns; its error or panic
// (recovered) marks that slot 'failed' and is reported. The fn of the
// job's last Task call runs them.
//
// gocron calls Lock and then the task on one goroutine, with one context
// per job, shared by all its runs; the task takes the run that this
// Locker's Lock of job claimed on that context. So that two runs of a job
// in progress at once never take each other's, a Lock of a job that has a
// Task does not return while an earlier run of the job, locked, has not
// been taken by its task (or unlocked). A call that no Lock of job preceded
// on its context — the gocron job named otherwise, a scheduler without
// this Locker (or with an Elector, which gocron consults instead), a
// Locker around this one that passes Lock another context than gocron's,
// a context of the caller's own among gocron.NewTask's parameters, or a
// call outside gocron — runs nothing, and returns (and reports) an error
// wrapping [ormlock.ErrInvalidArgument]. So does every call of the Task of
// an invalid job name or of a Locker that failed. See docs/SCHEDULES.md
// (The job's context).
func (l *Locker) Task(job string, fn func(ctx context.Context) error) func(ctx context.Context) error {
	err := l.usable()
	switch {
	case err != nil:
	case fn == nil:
		err = fmt.Errorf("%w: scheduler.Locker.Task(%q): nil function", ormlock.ErrInvalidArgument, job)
	default:
		err = validJob("Locker.Task", job)
	}
	if err != nil {
		return func(context.Context) error {
			if l != nil {
				l.cfg.report(err)
			}
			return err
		}
	}
	l.mu.Lock()
	if l.tasks == nil {
		l.tasks = make(map[string]*handoff)
	}
	if l.tasks[job] == nil {
		l.tasks[job] = &handoff{}
	}
	l.tasks[job].fn = fn // the last Task of job runs its reruns
	l.mu.Unlock()
	return func(ctx context.Context) error {
		h, err := l.take(job, ctx)
		if err != nil {
			l.cfg.report(err)
			return err
		}
		return h.run(ctx, fn)
	}
}

// handoff passes the runs of one job that has a Task from Lock to the
// task: at most one locked run not yet taken at a time.
type handoff struct {
	pending *heldRun      // locked, not yet taken by the task nor unlocked
	taken   chan struct{} // closed when pending is taken or unlocked
	// fn is the job's function (of its last Task), which runs the slots
	// an operator asked to rerun after a firing's own run (Locker.rerun)
	fn func(ctx context.Context) error
}

// hasTask reports whether job has a Task, whose function can run a
// second slot in one firing (a rerun).
func (l *Locker) hasTask(job string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tasks[job] != nil
}

// rerun runs, for h's firing, a slot of its job that an operator asked
// to rerun (ormlock.Rerun), after the firing's own run ended (Unlock):
// the job's Task function with rctx, the rerun's lock context
// (ormlock.Slot is the rerun's slot), ended also when gocron's job
// context ends. It runs on the claim's goroutine, before Unlock returns,
// so gocron counts it as part of the firing. Its error or panic marks the
// slot 'failed' and is reported by Unlock.
func (l *Locker) rerun(h *heldRun, rctx context.Context) (err error) {
	l.mu.Lock()
	var fn func(ctx context.Context) error
	if ho := l.tasks[h.job]; ho != nil {
		fn = ho.fn
	}
	l.mu.Unlock()
	slot, _ := ormlock.Slot(rctx)
	at := slot.Format(time.RFC3339Nano)
	switch {
	case fn == nil: // unreachable: Lock asks for one run without a Task
		return fmt.Errorf("ormlock: scheduler: job %q: the rerun of slot %s needs the job's Locker.Task, which can run a second slot in one firing", h.job, at)
	case h.gctx.Err() != nil:
		return wrapf(context.Cause(h.gctx), "job %q: gocron's context ended before the rerun of slot %s started", h.job, at)
	}
	ctx, cancel := context.WithCancelCause(rctx)
	stop := context.AfterFunc(h.gctx, func() { cancel(context.Cause(h.gctx)) })
	defer func() {
		stop()
		cancel(nil)
		if p := recover(); p != nil {
			// not gocron's goroutine: nobody would recover it
			err = fmt.Errorf("ormlock: scheduler: job %q, rerun of slot %s: panic: %v", h.job, at, p)
		}
	}()
	return fn(ctx)
}

// take returns the run of job that this Locker's Lock claimed on ctx, for
// its task, or why there is none.
func (l *Locker) take(job string, ctx context.Context) (*heldRun, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ho := l.tasks[job]
	if ho == nil || ho.pending == nil || ctx == nil || !sameContext(ho.pending.gctx, ctx) {
		return nil, fmt.Errorf("%w: scheduler.Locker.Task(%q): no run of the job was locked by this Locker on the task's context: "+
			"the gocron job must be named %q (gocron.WithName), its scheduler's locker must be this Locker (or one that passes gocron's context to this Locker's Lock as it is), "+
			"and the task must take gocron's context (no context of its own among gocron.NewTask's parameters); the job did not run",
			ormlock.ErrInvalidArgument, job, job)
	}
	h := ho.pending
	ho.clear()
	h.wrapped = true
	return h, nil
}

// clear frees the hand-off for the next run (l.mu held).
func (ho *handoff) clear() {
	ho.pending = nil
	close(ho.taken)
	ho.taken = nil
}

// sameContext reports whether a and b are one context: gocron hands Lock
// and the task the same value. A context whose dynamic type cannot be
// compared is no other's.
func sameContext(a, b context.Context) (same bool) {
	defer func() { _ = recover() }()
	return a == b
}

// run runs fn for h under the run's lock context, ended also when gctx
// (gocron's) ends, and records fn's error or panic as the run's failure.
func (h *heldRun) run(gctx context.Context, fn func(ctx context.Context) error) (err error) {
	ctx, cancel := context.WithCancelCause(h.ctx)
	stop := context.AfterFunc(gctx, func() { cancel(context.Cause(gctx)) })
	defer func() {
		stop()
		cancel(nil)
		if p := recover(); p != nil {
			h.l.failed(h, fmt.Errorf("panic: %v", p))
			panic(p) // on to gocron, which recovers it with AfterJobRunsWithPanic
		}
		if err != nil {
			h.l.failed(h, err)
		}
	}()
	return fn(ctx)
}

// failed records err as h's failure, unless one was recorded.
func (l *Locker) failed(h *heldRun, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h.failure == nil {
		h.failure = err
	}
}
