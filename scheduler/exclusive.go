package scheduler

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ormlock/ormlock"
)

// WithExclusive keeps the job itself exclusive across all the replicas while
// a run is in progress, besides running each slot once: a firing during a run
// of the same job (of an earlier slot) waits up to wait for it to end, then
// is skipped ([ormlock.ErrNotAcquired]; wait 0 skips at once) and its slot
// never runs. A run then holds a third connection of the pool. Applies to
// NewLocker and JobWrapper. The default is not exclusive: a job longer than
// its period runs in two slots at once. See docs/SCHEDULES.md (WithExclusive).
func WithExclusive(wait time.Duration) Option {
	return func(c *config) {
		if wait < 0 {
			c.fail(fmt.Errorf("%w: scheduler.WithExclusive: wait must not be negative, got %v", ormlock.ErrInvalidArgument, wait))
			return
		}
		c.exclusive, c.exclusiveWait = true, wait
	}
}

// jobKey names the lock that keeps a job exclusive (WithExclusive).
func jobKey(job string) string { return "ormlock.job:" + job }

// claim runs fn for (job, slot) through b: once per slot, and with
// WithExclusive, while holding the job's own lock too.
func (c *config) claim(ctx context.Context, b Backend, job string, slot time.Time, fn func(ctx context.Context) error) error {
	if !c.exclusive {
		return b.runOnce(ctx, job, slot, fn)
	}
	var wait []ormlock.Option
	if c.exclusiveWait > 0 {
		wait = append(wait, ormlock.WithWait(c.exclusiveWait))
	}
	return b.session(ctx, jobKey(job), func(ctx context.Context) error {
		return b.runOnce(ctx, job, slot, fn)
	}, wait...)
}

// PruneInterval is the least time between two prunings by one adapter with
// [WithPrune].
const PruneInterval = time.Hour

// pruneTimeout bounds one pruning.
const pruneTimeout = 5 * time.Minute

// WithPrune makes the adapter delete the ledger's finished rows whose slot is
// more than olderThan old, after a run it made, at most once per
// [PruneInterval], once the job's lock is released; errors go to the error
// handler. olderThan must exceed the longest period of the jobs plus the
// latest a trigger may come (a week is safe for daily jobs). Applies to
// NewLocker and JobWrapper. The default is no pruning. See
// docs/SCHEDULES.md (WithPrune).
func WithPrune(olderThan time.Duration) Option {
	return func(c *config) {
		if olderThan <= 0 {
			c.fail(fmt.Errorf("%w: scheduler.WithPrune: olderThan must be positive, got %v", ormlock.ErrInvalidArgument, olderThan))
			return
		}
		c.pruner = &pruner{olderThan: olderThan}
	}
}

// pruner prunes the ledger at most once per PruneInterval.
type pruner struct {
	olderThan time.Duration
	mu        sync.Mutex
	last      time.Time
	running   bool
}

// afterRun prunes the ledger after a run when PruneInterval has passed
// since the last pruning (or none happened yet).
func (c *config) afterRun(b Backend) {
	p := c.pruner
	if p == nil {
		return
	}
	now := time.Now()
	p.mu.Lock()
	due := !p.running && (p.last.IsZero() || now.Sub(p.last) >= PruneInterval)
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
	if _, err := b.prune(ctx, p.olderThan); err != nil {
		c.report(wrapf(err, "prune the ledger"))
	}
}
