package scheduler

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/schedhook"
)

// WithExclusive keeps the job itself exclusive across all the replicas while
// a run is in progress, besides running each slot once: a firing during a run
// of the same job (of an earlier slot) waits up to wait for it to end, then
// is skipped ([ormlock.ErrNotAcquired]; wait 0 skips at once) and its slot
// never runs. A run then holds a third connection of the pool. Applies to
// NewLocker and JobWrapper. The default is not exclusive: a job longer than
// its period runs in two slots at once. See docs/SCHEDULES.md (WithExclusive).
func WithExclusive(wait time.Duration) Option {
	return checked(wait < 0, fmt.Sprintf("WithExclusive: wait must not be negative, got %v", wait), func(c *config) { c.exclusive, c.exclusiveWait = true, wait })
}

// jobKey names the lock that keeps a job exclusive (WithExclusive).
func jobKey(job string) string { return "ormlock.job:" + job }

// claim runs fn through b for the slot of now under s (RunScheduled in
// claim mode: with ormlock.WithCatchUp among b's options, the missed slots
// too, as the firing options among extra allow (schedhook.Firing); fn
// reads each slot with ormlock.Slot), and with WithExclusive while holding
// the job's own lock. now, the firing's reading of the clock, picks the
// slot; the catch-up reads the clock (schedhook.Clock) again when it reads
// the ledger, after WithExclusive's wait, to compare it with the server's
// (its window is the server's).
func (c *config) claim(ctx context.Context, b Backend, job string, s ormlock.Schedule, now time.Time, fn func(ctx context.Context) error, extra ...ormlock.Option) error {
	f := b.Funcs()
	opts := append([]ormlock.Option{schedhook.Now(now), schedhook.Clock(c.now)}, extra...)
	if !c.exclusive {
		return f.Scheduled(ctx, job, s, fn, opts...)
	}
	var wait []ormlock.Option
	if c.exclusiveWait > 0 {
		wait = append(wait, ormlock.WithWait(c.exclusiveWait))
	}
	return f.Session(ctx, jobKey(job), func(lctx context.Context) error {
		return f.Scheduled(lctx, job, s, fn, opts...)
	}, wait...)
}

// pruneInterval is the least time between two prunings by one adapter with
// [WithPrune].
const pruneInterval = time.Hour

// pruneTimeout bounds one pruning.
const pruneTimeout = 5 * time.Minute

// WithPrune makes the adapter delete the ledger's finished rows whose slot is
// more than olderThan old by the database server's clock, after a run it
// made, at most once an hour, once the job's lock is released; errors go
// to the error handler. olderThan must exceed the longest period of the
// jobs plus the latest a trigger may come (a week is safe for daily jobs),
// and, with [ormlock.WithCatchUp] among the Backend's options, be at least
// the catch-up window plus 1 minute (the constructor refuses it
// otherwise). Applies to NewLocker and JobWrapper. The default is no
// pruning. See docs/SCHEDULES.md (WithPrune).
func WithPrune(olderThan time.Duration) Option {
	return checked(olderThan <= 0, fmt.Sprintf("WithPrune: olderThan must be positive, got %v", olderThan), func(c *config) { c.pruner = &pruner{olderThan: olderThan} })
}

// pruner prunes the ledger at most once per pruneInterval.
type pruner struct {
	olderThan time.Duration
	mu        sync.Mutex
	last      time.Time
	running   bool
}

// afterRun prunes the ledger after a run when pruneInterval has passed
// since the last pruning (or none happened yet).
func (c *config) afterRun(b Backend) {
	p := c.pruner
	if p == nil {
		return
	}
	now := time.Now()
	p.mu.Lock()
	due := !p.running && (p.last.IsZero() || now.Sub(p.last) >= pruneInterval)
	if due {
		p.running, p.last = true, now
	}
	p.mu.Unlock()
	if !due {
		return
	}
	defer func() {
		p.mu.Lock()
		p.running = false
		p.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), pruneTimeout)
	defer cancel()
	if _, err := b.Funcs().Prune(ctx, p.olderThan); err != nil {
		c.report(wrapf(err, "prune the ledger"))
	}
}

// checkCatchUp refuses what the catch-up of b's options (ormlock.WithCatchUp)
// cannot do here: CatchUpAll in a gocron Locker (one firing, one run), and
// a WithPrune window shorter than the catch-up window plus
// ledger.PruneMargin (the pruned 'done' rows would run again). b must have
// passed Check.
func (c *config) checkCatchUp(verb string, b Backend, locker bool) error {
	window, policy := schedhook.CatchUp(b.Funcs().Opts...)
	switch {
	case window <= 0:
		return nil
	case locker && policy == ormlock.CatchUpAll:
		return fmt.Errorf("%w: %s: ormlock.WithCatchUp(%v, ormlock.CatchUpAll): a gocron Locker answers one firing with one run, so it catches up the newest missed slot only (ormlock.CatchUpLatest), at a job's first firing after start",
			ormlock.ErrInvalidArgument, verb, window)
	case c.pruner != nil:
		return schedhook.CheckPrune(verb+" with scheduler.WithPrune", c.pruner.olderThan, b.Funcs().Opts...)
	}
	return nil
}
