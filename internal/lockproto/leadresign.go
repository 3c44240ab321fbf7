package lockproto

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
)

// A leader asked to step down (ormlock.ActionResign): while fn runs, a
// Lead term polls its key's row of the controls table through the pool
// (never on its lock's connection or transaction), once per check
// interval (the keepalive; a lease's renewal interval). A resign asked
// after the term began ends fn's context with a cause wrapping
// errs.ErrLockLost that names the author and the reason; the term is
// released as any other, and the campaign waits out the cooldown before
// it campaigns again. The controls table's SQL is the ledger's
// (ledger.ResignReader).

// ResignAsk is a resign as a key's row of the controls table records it.
type ResignAsk struct {
	// At is when it was asked, by the database server's clock.
	At time.Time
	// Owner is the Owner of the key's holder when it was asked ("" when
	// unknown).
	Owner string
	// Cooldown is how long the leader stays out of the election.
	Cooldown time.Duration
	// Author and Reason are the action's.
	Author, Reason string
}

// Cause is the cause fn's context ends with: it wraps errs.ErrLockLost
// and says who asked and why.
func (a ResignAsk) Cause() error {
	if a.Reason == "" {
		return fmt.Errorf("%w: asked to resign by %s", errs.ErrLockLost, a.Author)
	}
	return fmt.Errorf("%w: asked to resign by %s: %s", errs.ErrLockLost, a.Author, a.Reason)
}

// A ResignReader reads the controls row of a Lead's key, through the
// primary's pool (ledger.ResignReader).
type ResignReader interface {
	// Probe reports whether the controls table exists (no table: no
	// resign can be asked), and reads the server's clock.
	Probe(ctx context.Context) (now time.Time, exists bool, err error)
	// Asked reads the key's resign; ok is false when none was ever asked.
	Asked(ctx context.Context) (a ResignAsk, ok bool, err error)
}

// checkEvery is implemented by a Mechanism whose holder checks its lock
// at another interval than the keepalive (a lease: its renewals).
type checkEvery interface{ checkEvery(o *Op) time.Duration }

func (leaseMech) checkEvery(o *Op) time.Duration { return leaseEvery(o.Cfg.Lease) }

// ResignPoll is how often a Lead term of o polls for a resign: one
// keepalive interval, or under a lease one renewal interval.
func (o *Op) ResignPoll() time.Duration {
	if c, ok := o.target.mech.(checkEvery); ok {
		return c.checkEvery(o)
	}
	return o.Cfg.Keepalive
}

// resignWatch polls for a resign while a term's fn runs.
type resignWatch struct {
	stop  context.CancelFunc
	wg    sync.WaitGroup
	asked *ResignAsk // set before fn's context is cancelled, read after wg.Wait
}

// watchResign starts polling r for term o, elected at elected, and
// returns fn's context (a child of fctx, cancelled with the resign's
// cause when one is asked) and the watch; nil r watches nothing.
func watchResign(fctx context.Context, o *Op, r ResignReader, elected time.Time) (context.Context, *resignWatch) {
	w := &resignWatch{stop: func() {}}
	if r == nil {
		return fctx, w
	}
	rctx, cancel := context.WithCancelCause(fctx)
	pctx, stop := context.WithCancel(keepaliveContext(fctx, o))
	w.stop = stop
	w.wg.Go(func() {
		if a := poll(pctx, o, r, elected); a != nil {
			w.asked = a
			cancel(a.Cause())
			o.Emit(fctx, config.EventLockLost, a.Cause())
		}
	})
	return rctx, w
}

// end stops the watch once fn has returned and reports the resign that
// ended the term, if one did.
func (w *resignWatch) end() *ResignAsk {
	w.stop()
	w.wg.Wait()
	return w.asked
}

// poll probes for the controls table once (none: nothing to watch this
// term), then reads the key's row at once and every interval until ctx
// ends, and returns the first resign asked while this term leads: its
// resign_at after the term's start by the server's clock (estimated from
// the probe's answer: the server's now less the time since the election,
// which is never later than the real start), or recorded for this
// owner's term within the probe's round trip of that estimate. A failed
// read is tried again at the next interval (the lock's own check finds a
// server that is gone).
func poll(ctx context.Context, o *Op, r ResignReader, elected time.Time) *ResignAsk {
	every := max(o.ResignPoll(), config.MinKeepalive)
	timeout := max(every, time.Second)
	var began time.Time
	var rtt time.Duration
	tick := time.NewTicker(every)
	defer tick.Stop()
	for began.IsZero() {
		sent := time.Now()
		pctx, cancel := context.WithTimeout(ctx, timeout)
		now, exists, err := r.Probe(pctx)
		cancel()
		switch {
		case err == nil && !exists:
			return nil
		case err == nil:
			rtt = time.Since(sent)
			began = now.Add(-time.Since(elected))
			continue
		}
		if !wait(ctx, tick) {
			return nil
		}
	}
	for {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		a, ok, err := r.Asked(pctx)
		cancel()
		if err == nil && ok && asksTerm(a, o.Cfg.Owner, began, rtt) {
			return &a
		}
		if !wait(ctx, tick) {
			return nil
		}
	}
}

// asksTerm reports whether a asks the term of owner that began at began
// (by the server's clock, within rtt) to step down.
func asksTerm(a ResignAsk, owner string, began time.Time, rtt time.Duration) bool {
	if a.At.After(began) {
		return true
	}
	return owner != "" && a.Owner == owner && a.At.After(began.Add(-rtt))
}

// wait waits for the next tick, or ctx's end (false).
func wait(ctx context.Context, tick *time.Ticker) bool {
	select {
	case <-tick.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// cooldown is how long a leader asked to resign by a stays out.
func (a ResignAsk) cooldown() time.Duration {
	if a.Cooldown <= 0 {
		return config.DefaultResignCooldown
	}
	return a.Cooldown
}
