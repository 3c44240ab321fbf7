package lockproto

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
)

// Lock shapes (target.go's kindAll, kindShared, kindSemaphore) on every
// path that takes a lock: PostgreSQL's transaction-level locks (a
// Transaction's, a Session's lock-only transaction, the split protocol's,
// gormlock's savepoint), PostgreSQL's session-level locks on shared lock
// connections, and MySQL/MariaDB's GET_LOCK on a pinned connection. Where
// the lock travels with BEGIN in one message on PostgreSQL (onemsg.go:
// pgx, a Transaction's or a Session's transaction), a set and a semaphore
// are one statement of that message (pgshape.go); everywhere else (the
// two-message fallback, a savepoint of the caller's transaction, shared
// lock connections, MySQL/MariaDB) their statements go one lock call each,
// in the target's order, as below. A shape never takes the
// prepared-statement fast path.
//
//   - All: each key in the canonical order; a refusal ends the attempt, and
//     the keys taken before it are given back (PostgreSQL xact locks with
//     the transaction the caller rolls back; session-level and named locks
//     released at once). A wait spends one budget: each key waits at most
//     what is left of it (PostgreSQL: lock_timeout set to that before the
//     key's lock statement; MySQL/MariaDB: GET_LOCK's timeout).
//   - The lock phase (deadline.go's lockPhase): the caller's context and
//     the wait bound the whole take, round trips included. No lock
//     statement is sent once either has ended; the keys taken are given
//     back, and on MySQL/MariaDB the statement under way and those
//     releases are cut endGrace after it ended.
//   - Shared: one key, pg_advisory_xact_lock_shared and its try and
//     session-level forms.
//   - Semaphore: one round tries every slot once, from a random one (in
//     the one message: from slot 1, pgshape.go), and takes the first free
//     one (one slot at most per attempt); a wait
//     repeats the rounds with a backoff from semRetryMin, doubling, at most
//     semRetryMax, until the wait's budget ends. A slot lock is never
//     waited on: a free slot elsewhere would go unseen.

// The semaphore's backoff between rounds of a wait.
const (
	semRetryMin = 10 * time.Millisecond
	semRetryMax = 500 * time.Millisecond
)

// slotProbe asks, in the statement that tries a semaphore's last slot of
// an acquisition's first round (reached only when the other slots were
// held), whether slot n+1 is held: only a caller that uses the key with a
// larger n takes it, so two callers disagree on n (the semaphore admits
// max(n) holders). The answer rides on that statement (MySQL/MariaDB:
// IS_USED_LOCK; PostgreSQL: pg_locks), never a round trip of its own.
type slotProbe struct {
	it   lockItem // slot n+1
	seen bool     // it is held
}

// probeFor is the probe of the j-th slot tried in round round, nil but for
// the last slot of the first round.
func (t Target) probeFor(round, j int) *slotProbe {
	if round != 0 || j != len(t.items)-1 {
		return nil
	}
	return &slotProbe{it: t.above}
}

// reportProbe tells the observer when probe saw slot n+1 held
// (EventSemaphoreMismatch).
func (o *Op) reportProbe(ctx context.Context, probe *slotProbe) {
	if probe == nil || !probe.seen {
		return
	}
	n := len(o.target.items)
	o.Emit(ctx, config.EventSemaphoreMismatch, fmt.Errorf("ormlock: %s: slot %d (%s) is held, so another caller uses this semaphore with n above %d: up to that many hold it at once (the largest n counts)",
		o.Key.String(), n+1, probe.it.key.String(), n))
}

// errPhaseOver ends a set's take that the end of its lock phase cut short
// (lockPhase): the keys not tried yet were never asked for.
var errPhaseOver = errors.New("the wait ended before every key of the set was taken")

// heldItems are the items of a shape an Op holds, in the order taken.
type heldItems []lockItem

// shapeSteps are how a take of a shape (heldItems.takeShape) tries an
// item (try), waits for one (waitFor, nil: try only; non-nil exactly when
// the lock phase has an end) for what is left of the phase, gives back
// the items taken when a set is refused or cut short (undo, nil: nothing
// to do, the transaction's end gives them back), and reports what a
// semaphore's slot probe saw (report).
type shapeSteps struct {
	try     func(lockItem, *slotProbe) (bool, error)
	waitFor func(lockItem, time.Duration) (bool, error)
	undo    func([]lockItem) error
	report  func(context.Context, *slotProbe)
}

// takeRound takes t once: every item in order (All, Shared), or the first
// free slot from a random one (Semaphore), with s.try, or for a wait on
// one item with s.waitFor for what is left of the phase. No item is tried
// once the phase is over (lockPhase.over): a semaphore's round then ends
// unacquired with a nil error, a set's with errPhaseOver (alone: a failed
// undo replaces it). When an All is refused or cut short, s.undo releases
// the items taken. h is what is held.
func (h *heldItems) takeRound(t Target, ph lockPhase, round int, s shapeSteps) (bool, error) {
	try, waitFor := s.try, s.waitFor
	*h = (*h)[:0]
	if t.anyOne() {
		start := rand.IntN(len(t.items))
		for j := range t.items {
			if ph.over() {
				return false, nil
			}
			it := t.items[(start+j)%len(t.items)]
			probe := t.probeFor(round, j)
			ok, err := try(it, probe)
			s.report(ph.ctx, probe)
			if err != nil || ok {
				if ok {
					*h = append(*h, it)
				}
				return ok, err
			}
		}
		return false, nil
	}
	for _, it := range t.items {
		var ok bool
		var err error
		switch {
		case ph.over():
			err = errPhaseOver // nothing more is sent; what was taken is given back below
		case waitFor != nil:
			ok, err = waitFor(it, time.Until(ph.end))
		default:
			ok, err = try(it, nil)
		}
		if err == nil && ok {
			*h = append(*h, it)
			continue
		}
		return false, h.giveBack(err, s.undo)
	}
	return true, nil
}

// giveBack releases with undo (nil: nothing to do) what a set took before
// it ended with err (nil: refused; errPhaseOver: cut short). A failed
// undo is not a clean refusal: its error, which the caller answers by
// destroying the connection, replaces errPhaseOver.
func (h *heldItems) giveBack(err error, undo func([]lockItem) error) error {
	if undo != nil && len(*h) > 0 {
		if uerr := undo(*h); uerr != nil {
			if errors.Is(err, errPhaseOver) {
				err = nil
			}
			err = errs.Join(err, uerr)
		}
	}
	*h = (*h)[:0]
	return err
}

// takeShape is takeRound, repeated for a semaphore's wait with the
// backoff above while the phase lasts.
func (h *heldItems) takeShape(t Target, ph lockPhase, s shapeSteps) (bool, error) {
	pause := semRetryMin
	for round := 0; ; round++ {
		ok, err := h.takeRound(t, ph, round, s)
		if err != nil || ok || !t.anyOne() || ph.end.IsZero() {
			return ok, err
		}
		left := time.Until(ph.end)
		if left <= 0 || !sleepCtx(ph.ctx, min(pause, left)) {
			return false, nil
		}
		pause = min(2*pause, semRetryMax)
	}
}

// settleShape is settle for a shape: a take that ended unacquired once
// ctx had ended (the phase cut short by it, or a refusal that came after
// it) is ErrNotAcquired wrapping the context's error; a set cut short by
// the end of the wait is ErrNotAcquired saying so.
func (o *Op) settleShape(ctx context.Context, ok, bounded bool, err error) error {
	cut := errors.Is(err, errPhaseOver)
	if err == nil || cut {
		if cerr := ctxErr(ctx); cerr != nil {
			return notAcquired(ctx, o, cerr)
		}
		switch {
		case cut && bounded: // the wait was the deadline's, a moment before ctx's timer
			return notAcquired(ctx, o, context.DeadlineExceeded)
		case cut:
			return notAcquired(ctx, o, fmt.Errorf("%w (WithWait(%v))", errPhaseOver, o.Cfg.Wait))
		}
	}
	return settle(ctx, o, ok, bounded, err)
}
