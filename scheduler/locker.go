package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/schedhook"
)

// Locker is a gocron v2 distributed locker (gocron.WithDistributedLocker or
// gocron.WithDistributedJobLocker) with RunOnce semantics: across all the
// schedulers that share the database, each scheduled run of a job happens
// once, however far apart their clocks and start times are.
//
// Lock maps the time of the call to the run's slot under the job's schedule
// and claims (job, slot) as RunOnce's claim mode does ([ormlock.WithClaim]),
// holding it until Unlock, which marks the ledger row 'done' (or 'failed'
// when the job failed and [Locker.RecordFailures] is wired in: gocron does
// not tell a locker otherwise) and releases the lock. An instance that
// comes while another runs the slot, or after it ran, gets
// [ormlock.ErrNotAcquired] or [ormlock.ErrAlreadyDone], and gocron skips the
// run. A shutdown never leaves a 'running' row or a held lock behind. The job
// name is gocron's (gocron.WithName), the same on every replica. The job's
// context is gocron's unless [Locker.Task] wraps its task, which then runs
// under the run's lock context. A slot an operator asked to rerun
// ([ormlock.Rerun]) runs at the next firing of any replica: after the
// firing's own run, by the Task's function, before Unlock returns; or, for
// a job without a Task, in place of a firing whose own slot is taken (see
// docs/SCHEDULES.md, Operators' controls). A Locker is safe for concurrent use. See
// docs/SCHEDULES.md (Locker (gocron); The job's context).
type Locker struct {
	b     Backend
	def   ormlock.Schedule // nil in strict mode without a default
	cfg   config
	err   error // the constructor's error: every Lock returns it
	built bool  // made by NewLocker

	mu    sync.Mutex
	held  map[string][]*heldRun // runs between Lock and Unlock, by job
	fired map[string]bool       // jobs fired since the Locker was made
	tasks map[string]*handoff   // jobs that have a Task, by name
}

var _ gocron.Locker = (*Locker)(nil)

// NewLocker returns a Locker on b whose jobs run on schedule (normally the
// gocron job's own, written for ormlock: [ormlock.Cron] with the expression
// and zone of gocron.CronJob) unless [WithJobSchedule] gives a job its own;
// with [WithStrict], schedule may be nil and every job needs its own. A job
// that fires again within a slot it has already run or skipped is reported
// (see docs/SCHEDULES.md, A trigger denser than its schedule).
// Bad input (a nil schedule, an invalid Backend or option) is an error
// wrapping [ormlock.ErrInvalidArgument]; the Locker returned with it fails
// closed: every Lock returns that error without taking a lock. See
// docs/SCHEDULES.md (Locker (gocron)).
func NewLocker(b Backend, schedule ormlock.Schedule, opts ...Option) (*Locker, error) {
	const verb = "scheduler.NewLocker"
	cfg, cfgErr := newConfig(opts)
	err := b.Check(verb)
	switch {
	case err != nil:
	case cfgErr != nil:
		err = cfgErr
	case cfg.checkCatchUp(verb, b, true) != nil:
		err = cfg.checkCatchUp(verb, b, true)
	case schedule == nil && !cfg.strict:
		err = fmt.Errorf("%w: %s: nil schedule (pass the jobs' schedule, or scheduler.WithStrict() and a scheduler.WithJobSchedule per job)", ormlock.ErrInvalidArgument, verb)
	}
	if err != nil {
		return &Locker{cfg: cfg, err: err, built: true}, err
	}
	return &Locker{b: b, def: schedule, cfg: cfg, built: true}, nil
}

// schedule returns the schedule of job, or why it has none.
func (l *Locker) schedule(job string) (ormlock.Schedule, error) {
	if s, ok := l.cfg.jobs[job]; ok {
		return s, nil
	}
	switch {
	case l.cfg.strict:
		return nil, fmt.Errorf("%w: scheduler.Locker: job %q has no schedule of its own, which strict mode requires (scheduler.WithJobSchedule(%q, ...))", ormlock.ErrInvalidArgument, job, job)
	case l.def == nil: // unreachable: NewLocker refuses it
		return nil, fmt.Errorf("%w: scheduler.Locker: job %q has no schedule", ormlock.ErrInvalidArgument, job)
	}
	return l.def, nil
}

// Lock claims the current slot of job for this instance, and holds it until
// the returned lock's Unlock. It returns an error wrapping
// [ormlock.ErrAlreadyDone] when the slot has been run, [ormlock.ErrPaused]
// when an operator paused the job (the slot is recorded 'skipped'),
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
	s, err := l.schedule(job)
	if err != nil {
		l.cfg.report(err)
		return nil, err
	}
	now := l.cfg.now()
	slot := s.Slot(now)
	if err := ended(ctx); err != nil {
		// a skip that sends nothing: no claim is started, so none can
		// outlive the call (see docs/SCHEDULES.md, Locker (gocron))
		return nil, wrapf(err, "job %q, slot %s", job, slot.Format(time.RFC3339Nano))
	}
	if err := l.cfg.refires.fired(job, slot, s); err != nil {
		l.cfg.report(err)
	}
	h := &heldRun{l: l, job: job, slot: slot, gctx: ctx, cfg: &l.cfg, b: l.b, release: make(chan struct{}), done: make(chan error, 1)}
	started := make(chan struct{})
	extra := []ormlock.Option{schedhook.Firing(false)}
	if l.firstFiring(job) {
		// one firing, one run: with ormlock.WithCatchUp, the newest slot
		// of the window that has not run, the current one if it has not
		extra[0] = schedhook.Firing(true)
	}
	if !l.hasTask(job) {
		// gocron runs the job once per Lock, and the Locker cannot call
		// it: a slot an operator asked to rerun runs in place of a
		// firing's own slot that is taken, never after it (see
		// docs/SCHEDULES.md, Operators' controls)
		extra = append(extra, schedhook.OneRun())
	}

	// The attempt honours ctx; the hold, once the slot is claimed, does
	// not: ctx is gocron's job context, which a shutdown cancels while the
	// job may still run, and gocron calls Unlock after the job in any case.
	hctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	detach := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	go func() {
		defer cancel(nil)
		calls := 0
		h.done <- l.cfg.claim(hctx, l.b, job, s, now, func(rctx context.Context) error {
			if calls++; calls > 1 {
				// a slot an operator asked to rerun, after the firing's
				// own run: the job's Task runs it
				err := l.rerun(h, rctx)
				h.failed = h.failed || err != nil
				return err
			}
			if ran, ok := ormlock.Slot(rctx); ok {
				h.slot = ran // a caught-up slot; read after started
			}
			h.ctx = rctx // the run's, for its Task; read after started
			if !detach() {
				// ctx ended while the slot was being claimed: do not
				// start a run that gocron will not make; the row is
				// marked failed, so a later trigger may run the slot.
				return wrapf(context.Cause(ctx), "job %q: gocron's context ended before the run started", job)
			}
			close(started)
			<-h.release
			h.failed = h.failure != nil
			return h.failure // set by JobFailed before Unlock, if the job failed
		}, extra...)
	}()
	select {
	case <-started:
		if err := l.hold(ctx, h); err != nil {
			return nil, err
		}
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
	case !l.built:
		if err := l.b.Check(verb); err != nil {
			return err
		}
		return fmt.Errorf("%w: %s: zero Locker (build one with scheduler.NewLocker)", ormlock.ErrInvalidArgument, verb)
	}
	return l.b.Check(verb)
}

// firstFiring reports whether this is the first Lock of job since the
// Locker was made.
func (l *Locker) firstFiring(job string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fired[job] {
		return false
	}
	if l.fired == nil {
		l.fired = make(map[string]bool)
	}
	l.fired[job] = true
	return true
}

// Slot returns the slot of the run of job in progress (between Lock and
// Unlock), for a job whose task [Locker.Task] does not wrap: its context is
// gocron's, which ormlock.Slot cannot read, so a job that may run a
// caught-up slot asks its Locker here. ok is false when no run, or more
// than one, of job is in progress. A wrapped job reads ormlock.Slot(ctx).
func (l *Locker) Slot(job string) (slot time.Time, ok bool) {
	if l == nil {
		return time.Time{}, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if hs := l.held[job]; len(hs) == 1 {
		return hs[0].slot, true
	}
	return time.Time{}, false
}

// hold records h, a claimed run, as a run of its job in progress, for
// JobFailed and, when the job has a Task, for its task: after the earlier
// run of the job that waits for its task, if any, was taken (or unlocked).
// When ctx ends meanwhile, the run is given up (its row marked failed, as
// a run cut short before it started) and hold returns the skip.
func (l *Locker) hold(ctx context.Context, h *heldRun) error {
	l.mu.Lock()
	for {
		ho := l.tasks[h.job]
		if ho == nil {
			break
		}
		if ho.pending == nil {
			ho.pending, ho.taken = h, make(chan struct{})
			break
		}
		taken := ho.taken
		l.mu.Unlock()
		select {
		case <-taken:
		case <-ctx.Done():
			h.failure = wrapf(context.Cause(ctx), "job %q: gocron's context ended before the run started", h.job)
			close(h.release)
			if err := <-h.done; err != nil && !errors.Is(err, h.failure) {
				l.cfg.report(wrapf(err, "job %q, slot %s", h.job, h.slot.Format(time.RFC3339Nano)))
			}
			return wrapf(ended(ctx), "job %q, slot %s", h.job, h.slot.Format(time.RFC3339Nano))
		}
		l.mu.Lock()
	}
	defer l.mu.Unlock()
	if l.held == nil {
		l.held = make(map[string][]*heldRun)
	}
	l.held[h.job] = append(l.held[h.job], h)
	return nil
}

// unhold forgets h (at Unlock), and frees the hand-off to its job's task
// when that never took it.
func (l *Locker) unhold(h *heldRun) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ho := l.tasks[h.job]; ho != nil && ho.pending == h {
		ho.clear()
	}
	hs := l.held[h.job]
	for i, x := range hs {
		if x == h {
			hs = append(hs[:i:i], hs[i+1:]...)
			break
		}
	}
	if len(hs) == 0 {
		delete(l.held, h.job)
	} else {
		l.held[h.job] = hs
	}
}

// RecordFailures returns the gocron job option that tells the Locker how a
// job ended: gocron's event listeners for a job that returned an error
// (gocron.AfterJobRunsWithError) or panicked (gocron.AfterJobRunsWithPanic,
// which makes gocron recover the panic), which gocron calls before Unlock.
// The run's slot is then recorded 'failed' with the error's text (a panic as
// "panic: VALUE"), the error goes to the error handler, and a later firing
// in the same slot (or a catch-up) runs it again; without it, every run is
// recorded 'done'. Pass it to every job, in one line:
//
//	gocron.NewScheduler(gocron.WithDistributedLocker(locker), gocron.WithGlobalJobOptions(locker.RecordFailures()))
//
// A job's own AfterJobRunsWithError or AfterJobRunsWithPanic listener
// replaces this one (gocron keeps one of each); call [Locker.JobFailed] from
// it. See docs/SCHEDULES.md (Failed gocron runs).
func (l *Locker) RecordFailures() gocron.JobOption {
	return gocron.WithEventListeners(
		gocron.AfterJobRunsWithError(func(_ uuid.UUID, job string, err error) { l.JobFailed(job, err) }),
		gocron.AfterJobRunsWithPanic(func(_ uuid.UUID, job string, p any) { l.JobFailed(job, fmt.Errorf("panic: %v", p)) }),
	)
}

// JobFailed records that the run of job in progress (between this Locker's
// Lock and Unlock) failed with err: Unlock then marks its slot 'failed'
// with err's text instead of 'done'. [Locker.RecordFailures] calls it from
// gocron's event listeners; call it from a listener of your own. When
// several runs of job are in progress at once (a job longer than its period,
// without gocron's singleton mode), which one failed is unknown: none is
// marked, and the error handler is told. Runs whose task [Locker.Task]
// wraps are not counted: the wrapper records their failures itself. A nil
// err, or a job with no such run in progress, does nothing; of several
// calls for one run, the first counts.
func (l *Locker) JobFailed(job string, err error) {
	if l == nil || err == nil {
		return
	}
	l.mu.Lock()
	var hs []*heldRun
	for _, h := range l.held[job] {
		if !h.wrapped {
			hs = append(hs, h)
		}
	}
	if len(hs) == 1 && hs[0].failure == nil {
		// the first one counts: after a panic's listener, gocron calls
		// the error listener too, with "gocron: panic recovered from ..."
		hs[0].failure = err
	}
	l.mu.Unlock()
	if len(hs) > 1 {
		l.cfg.report(wrapf(err, "job %q: %d runs in progress failed one of them, which one is unknown: none is recorded failed", job, len(hs)))
	}
}

// heldRun is a claimed (job, slot) held for gocron until Unlock.
type heldRun struct {
	l       *Locker
	failure error // the job's error (JobFailed, Task), read after release
	job     string
	slot    time.Time
	gctx    context.Context // the context Lock was given: gocron's job context
	ctx     context.Context // the run's (its verb's fn context), for its Task
	wrapped bool            // taken by a Task (l.mu)
	failed  bool            // a run of the firing failed (claim goroutine; read after done)
	cfg     *config
	b       Backend
	release chan struct{}
	done    chan error
	once    sync.Once
	err     error
}

// Unlock marks the run's ledger row 'done' (or 'failed', when
// [Locker.JobFailed] said so) and releases its lock, whatever ctx says (see
// [Locker]). It returns RunOnce's error, if any (a lost lock
// wraps [ormlock.ErrLockLost]), also handed to the error handler, since
// gocron ignores it. Calling it again returns the same error.
func (h *heldRun) Unlock(context.Context) error {
	h.once.Do(func() {
		h.l.unhold(h)
		close(h.release)
		if err := <-h.done; err != nil && (h.failed || !skipped(err)) {
			// a skip after the run (a rerun that another replica took)
			// is none of the firing's errors
			h.err = wrapf(err, "job %q, slot %s", h.job, h.slot.Format(time.RFC3339Nano))
			h.cfg.report(h.err)
		}
		h.cfg.afterRun(h.b)
	})
	return h.err
}
