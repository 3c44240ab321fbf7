package scheduler

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/schedhook"
)

// defaultRetry is how long an [Elector] waits before it campaigns again
// after an error its campaign does not retry by itself (see [WithRetry]).
const defaultRetry = 2 * time.Second

// Option configures [NewLocker], [NewElector] or [JobWrapper]; each option
// says which of them it applies to, and the others ignore it.
type Option func(*config)

type config struct {
	jobs    map[string]ormlock.Schedule
	onError func(error)
	logger  cron.Logger
	now     func() time.Time
	retry   time.Duration
	err     error
	// exclusive: keep the job itself exclusive across replicas, waiting up
	// to exclusiveWait for a run in progress (WithExclusive)
	exclusive     bool
	exclusiveWait time.Duration
	pruner        *pruner  // WithPrune; nil: no pruning
	strict        bool     // WithStrict: refuse jobs without their own schedule
	refires       *refires // firings per slot, to report a trigger denser than its schedule
	follow        bool     // WithoutCampaign: an Elector that never campaigns
}

func newConfig(opts []Option) (config, error) {
	c := config{now: time.Now, retry: defaultRetry, refires: &refires{}}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c, c.err
}

func (c *config) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// checked returns the Option that applies set or, when its argument is bad,
// records the error "scheduler.<what>" (wrapping ormlock.ErrInvalidArgument)
// instead.
func checked(bad bool, what string, set func(c *config)) Option {
	return func(c *config) {
		if bad {
			c.fail(fmt.Errorf("%w: scheduler.%s", ormlock.ErrInvalidArgument, what))
			return
		}
		set(c)
	}
}

// report hands err to the error handler: the one set with
// [WithErrorHandler], else the cron.Logger of [WithCronLogger], else
// slog.Default() at level Error.
func (c *config) report(err error) {
	switch {
	case c.onError != nil:
		c.onError(err)
	case c.logger != nil:
		c.logger.Error(err, "ormlock: scheduled run failed")
	default:
		// a fixed message, the error as an attribute: slog's handlers quote
		// attribute values, while the message is written as it is, and the
		// error carries the job's own text
		slog.Default().Error("ormlock: scheduler error", "err", err)
	}
}

// skipped reports whether err is an expected outcome for a replica that
// does not run: another instance holds the slot or leads, the slot is
// done, or an operator paused the job (ormlock.ErrPaused: every replica's
// firing is skipped while it is paused, which is no failure to report).
func skipped(err error) bool {
	return errors.Is(err, ormlock.ErrAlreadyDone) || errors.Is(err, ormlock.ErrNotAcquired) || errors.Is(err, ormlock.ErrPaused)
}

// WithJobSchedule sets the schedule of one job of a [Locker]: the slot of a
// run of the gocron job named job (gocron.WithName) is
// schedule.Slot(now). Jobs without their own schedule use the Locker's
// default. Repeating it for the same job keeps the last. Applies to
// NewLocker. The default is none.
func WithJobSchedule(job string, schedule ormlock.Schedule) Option {
	return func(c *config) {
		if schedule == nil {
			c.fail(fmt.Errorf("%w: scheduler.WithJobSchedule(%q): nil schedule", ormlock.ErrInvalidArgument, job))
			return
		}
		if err := validJob("WithJobSchedule", job); err != nil {
			c.fail(err)
			return
		}
		if c.jobs == nil {
			c.jobs = make(map[string]ormlock.Schedule)
		}
		c.jobs[job] = schedule
	}
}

// WithErrorHandler sets the function that receives every error other than a
// skip (a slot done, held by another instance, or of a job an operator
// paused: [ormlock.ErrPaused]): a run that could not
// start, a failed release or a lost lock, a wrapped job's error, a failed or
// lost leadership. It is called on the scheduler's or the Elector's goroutine
// and must not block for long. Applies to all constructors. The default logs
// through slog.Default() at level Error (or [WithCronLogger]'s logger, when
// set). See docs/SCHEDULES.md (Errors, skips and fail closed).
func WithErrorHandler(f func(err error)) Option {
	return checked(f == nil, "WithErrorHandler: nil function", func(c *config) { c.onError = f })
}

// WithCronLogger makes [JobWrapper] log through l, as robfig/cron's own
// wrappers do: a skipped firing at Info ("ormlock: skipped", with the job,
// the slot and the reason) and errors at Error, unless [WithErrorHandler]
// takes them. Applies to JobWrapper. The default logs no skips, and errors
// as WithErrorHandler describes.
func WithCronLogger(l cron.Logger) Option {
	return checked(l == nil, "WithCronLogger: nil cron.Logger", func(c *config) { c.logger = l })
}

// WithClock sets the clock whose reading is mapped to the slot when a job
// fires. With [ormlock.WithCatchUp] among the Backend's options it is read
// again when the catch-up reads the ledger (after [WithExclusive]'s wait)
// and compared with the database server's clock: more than 1 minute apart,
// the firing runs nothing and reports an error naming the difference (see
// docs/SCHEDULES.md (Clocks of catch-up and Prune)). Applies to NewLocker
// and JobWrapper. The default is time.Now; tests use it to give replicas
// skewed clocks.
func WithClock(now func() time.Time) Option {
	return checked(now == nil, "WithClock: nil function", func(c *config) { c.now = now })
}

// WithRetry sets how long an [Elector] waits before it campaigns again
// after an error that its campaign does not retry by itself (a refused
// login, a missing privilege; connection errors are retried with a backoff
// of at most 5 s, and a free lock is taken at once, as the campaign waits
// for it on the server). Applies to NewElector. The default is
// 2s.
func WithRetry(d time.Duration) Option {
	return checked(d <= 0, fmt.Sprintf("WithRetry: duration must be positive, got %v", d), func(c *config) { c.retry = d })
}

// validJob checks a job name as the ledger will (non-empty valid UTF-8
// without NUL bytes or a trailing space, at most 191 characters), so that a
// bad name fails at construction rather than at the first run.
func validJob(verb, job string) error { return schedhook.CheckJob("scheduler."+verb, job) }
