package scheduler

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ormlock/ormlock"
)

// WithExclusive keeps the job itself exclusive across all the replicas
// while a run is in progress, in addition to running each slot once: a
// firing that comes while a run of the same job (of an earlier slot) is
// still going on, on any replica, waits up to wait for it to end, and is
// skipped ([ormlock.ErrNotAcquired]) if it has not — wait 0 skips at once.
// A skipped firing's slot does not run (it is not retried later); its
// ledger has no row. Applies to NewLocker and JobWrapper.
//
// The default is not exclusive: the adapters lock each slot, not the job,
// so a job that runs longer than its period runs in two slots at once,
// possibly on two replicas (gocron's singleton mode and robfig/cron's
// SkipIfStillRunning only see one process).
//
// How: the run also holds the lock named "ormlock.job:" + job (in the
// Backend's namespace) with Session semantics, on a connection of its own,
// for as long as the run lasts (so a run holds three connections of the
// pool instead of two); its loss is reported like the slot lock's.
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

// WithPrune makes the adapter delete the ledger's finished rows whose slot
// is more than olderThan old ([gormlock.Prune] or entlock.Prune: in batches,
// never a running claim): after a run it made, at most once per
// [PruneInterval], on the goroutine that ran the job, once the job's lock is
// released. Errors go to the error handler. olderThan must be longer than
// the longest period of the jobs plus the latest a trigger may come, since
// a trigger for a slot whose row is gone runs it again: a week is safe for
// daily jobs. Applies to NewLocker and JobWrapper. The default is no
// pruning (call gormlock.Prune yourself, or not at all).
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
