// Package schedhook is what a scheduler integration needs of ormlock beyond
// the verbs: options that say which firing a RunScheduled call answers and
// how a claimed run gets its transaction, and the checks a scheduler runs
// when a job is registered rather than when it first fires. The scheduler
// module (gocron's Locker and Elector, robfig/cron's JobWrapper) is built
// on it and on the adapters' public verbs only; any other scheduler can be
// too.
//
// Each option is an [ormlock.Option] and goes with the verb's other
// options; none of them changes what a verb does without it.
package schedhook

import (
	"context"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/sched"
)

// Now makes RunScheduled take t as the current time: it runs the
// schedule's slot of t, and catch-up ([ormlock.WithCatchUp]) looks back
// from t. A scheduler passes the time it fired the job for, so that a run
// that starts late still claims the slot it was fired for. The default is
// the time of the call; the zero t keeps it.
func Now(t time.Time) ormlock.Option { return func(c *config.Config) { c.Now = t } }

// Clock sets the clock that RunScheduled's catch-up reads when it reads
// the ledger, to compare it with the database server's (the window is the
// server's; a caller's clock more than a bound away from it is an error
// and nothing runs), and, without [Now], the current time. A scheduler
// with a clock of its own (scheduler.WithClock) passes it. The default is
// time.Now; nil keeps it.
func Clock(clock func() time.Time) ormlock.Option {
	return func(c *config.Config) { c.SetClock(clock) }
}

// Firing makes RunScheduled answer one firing of a scheduler with one run,
// as a gocron Locker must: at a job's first firing (first true), with
// [ormlock.WithCatchUp], the current slot if it has not run, else the
// newest missed slot of the window; at a later firing (first false) the
// current slot only, with no catch-up. Without it RunScheduled runs every
// missed slot its catch-up policy asks for, then the current one.
func Firing(first bool) ormlock.Option {
	return func(c *config.Config) {
		c.Firing = config.FiringLater
		if first {
			c.Firing = config.FiringFirst
		}
	}
}

// OneRun makes RunScheduled call fn at most once per call, for a
// scheduler that can hand one firing one run only (a gocron Locker whose
// job's task it cannot call itself): a slot an operator asked to rerun
// ([ormlock.Rerun]) then runs in place of the call's own slot when that
// one is not run by this call (done, run by another replica, paused), and
// stays pending otherwise. Without it the pending reruns run after the
// call's own slot, each with fn. See docs/SCHEDULES.md (Operators'
// controls).
func OneRun() ormlock.Option { return func(c *config.Config) { c.OneRun = true } }

// ClaimNoTx is [ormlock.WithClaim] for a job that needs no transaction:
// RunOnce and RunScheduled commit the claim, run fn outside any
// transaction and then record its outcome, and sqllock's and pgxlock's fn
// get a nil tx instead of a transaction opened for it. gormlock's and
// entlock's fn are unchanged (they get the db or client of claim mode).
func ClaimNoTx() ormlock.Option {
	return func(c *config.Config) { c.Claim, c.ClaimNoTx = true, true }
}

// FirstTry makes Lead's first campaign attempt try once instead of
// waiting for the lock, and close tried when that attempt has ended
// without electing this instance; the campaign then goes on as usual.
// When the attempt elects it, fn is called and tried is closed only when
// that term ends, so a scheduler that must know at start-up whether this
// instance leads (scheduler.NewElector) waits for tried or for fn's
// start, and whichever comes first answers it. Any other verb ignores it.
func FirstTry(tried chan struct{}) ormlock.Option {
	return func(c *config.Config) { c.FirstTry = tried }
}

// CheckOptions returns the error that every verb given opts returns before
// taking a lock (an invalid option, wrapping [ormlock.ErrInvalidArgument]
// or [ormlock.ErrInvalidKey]), or nil.
func CheckOptions(opts ...ormlock.Option) error { return config.New(opts...).Err() }

// CatchUp returns the catch-up window and policy that opts set
// ([ormlock.WithCatchUp]): a zero window when they set none.
func CatchUp(opts ...ormlock.Option) (window time.Duration, policy ormlock.CatchUpPolicy) {
	c := config.New(opts...)
	return c.CatchUpWindow, c.CatchUpPolicy
}

// CheckJob returns the error RunOnce returns for the job name job (empty,
// not valid UTF-8, with a NUL byte or a trailing space, or too long for the
// ledger), wrapping [ormlock.ErrInvalidArgument] with verb in its text, or
// nil.
func CheckJob(verb, job string) error { return ledger.ValidateJob(verb, job) }

// CheckPrune returns the error Prune returns when olderThan is shorter than
// the catch-up window of opts (the deleted rows would make the catch-up
// run their slots again), wrapping [ormlock.ErrInvalidArgument] with verb
// in its text, or nil.
func CheckPrune(verb string, olderThan time.Duration, opts ...ormlock.Option) error {
	return ledger.CheckCatchUp(verb, olderThan, config.New(opts...))
}

// WithSlot returns ctx carrying slot, which [ormlock.Slot] then reads: for
// a scheduler whose verb hands fn no context of its own (entlock's fn gets
// a transaction; read its slot with entlock.Slot(tx)) to hand its job the
// slot it runs. The slot is information only: RunOnce takes the slot it
// claims as an argument, never from a context.
func WithSlot(ctx context.Context, slot time.Time) context.Context {
	return sched.WithSlot(ctx, slot)
}
