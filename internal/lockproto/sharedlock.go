package lockproto

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
)

// Session on a shared lock connection: the try-lock with backoff, the
// release and the fencing token (the connections themselves: sharedconn.go).

// lockKey is the identity of t's one exclusive key in the process's set,
// the same as a shape's item of that lock has (Mechanism.local).
func (t Target) lockKey() any {
	return t.mech.local(t.each()[0]).key
}

// session is o's Session on one of p's shared lock connections (see
// above), p the pool of db, whose fencing counter was checked.
func (p *sharedPool) session(ctx context.Context, o *Op, db *sql.DB, fn func(ctx context.Context) error) (err error) {
	c, err := p.acquire(ctx, o, db)
	if err != nil {
		return err
	}
	h := &sharedHold{op: o, ctx: ctx, every: o.Cfg.Keepalive}
	if err := p.token(ctx, o, db, c); err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(tokenContext(ctx, o))
	h.cancel = cancel
	p.mu.Lock()
	if !c.hold(h) {
		h.lost = errSharedConnDead
		cancel(errs.ErrLockLost)
	}
	p.mu.Unlock()

	defer func() {
		cancel(context.Canceled)
		p.mu.Lock()
		c.unhold(h)
		lostErr := h.lost
		p.mu.Unlock()
		if lostErr == nil {
			if rerr := releaseWithin(ctx, func(rctx context.Context) error { return c.unlock(rctx, o) }); rerr != nil {
				o.Emit(ctx, config.EventReleaseFailed, rerr)
				p.kill(c, rerr, h)
				lostErr = rerr
			} else {
				o.Emit(ctx, config.EventReleased, nil)
			}
		}
		p.leave(c, o)
		if lostErr != nil {
			lerr := errs.Join(fmt.Errorf("%w: %q", errs.ErrLockLost, o.Key.String()), lostErr)
			err = errs.Join(lerr, err)
		}
	}()
	return fn(fctx)
}

// acquire takes o's lock on one of p's connections, trying again with
// a backoff while it is held elsewhere, for as long as the configured wait
// (cut by ctx) allows: no lock statement is sent once that lock phase is
// over (lockPhase). On success the caller owns a use of c (p.leave).
func (p *sharedPool) acquire(ctx context.Context, o *Op, db *sql.DB) (*sharedConn, error) {
	wait, bounded, err := attempt(ctx, o)
	if err != nil {
		return nil, err
	}
	ph := o.phase(ctx, wait)
	deadline := o.start.Add(wait)
	pause := sharedRetryMin
	for round := 0; ; round++ {
		c, ok, err := p.try(ctx, o, db, ph, round)
		if err != nil || ok || ctxErr(ctx) != nil {
			// a refusal once ctx ended (or a try cut short by it) wraps its error
			return c, o.settleShape(ctx, ok, bounded, err)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, settle(ctx, o, false, bounded, nil)
		}
		if !sleepCtx(ctx, min(pause, left)) {
			return nil, failed(ctx, o, ctx.Err())
		}
		pause = min(2*pause, o.Cfg.Keepalive)
	}
}

// try tries o's lock once (the round-th time): busy in this
// process, or on the server. A semaphore tries its slots one by one, from
// a random one, while the phase lasts; the last of the first round also
// probes slot n+1 (slotProbe).
func (p *sharedPool) try(ctx context.Context, o *Op, db *sql.DB, ph lockPhase, round int) (*sharedConn, bool, error) {
	for j, res := range o.target.reservations() {
		if ph.over() {
			break
		}
		if !p.reserve(res) {
			continue // held in this process
		}
		var probe *slotProbe
		if o.target.anyOne() {
			probe = o.target.probeFor(round, j)
		}
		c, ok, err := p.tryOn(ctx, o, db, res, ph, probe)
		o.reportProbe(ctx, probe)
		if err != nil || ok {
			return c, ok, err
		}
	}
	return nil, false, nil
}

// tryOn takes o's locks res, reserved in this process, on one of
// p's connections; on failure the reservation is given back.
func (p *sharedPool) tryOn(ctx context.Context, o *Op, db *sql.DB, res []localLock, ph lockPhase, probe *slotProbe) (*sharedConn, bool, error) {
	c, err := p.pick(ctx, db, o)
	if err != nil {
		p.unreserve(res)
		return nil, false, err
	}
	// The try waits for its turn on c for as long as ctx allows. It never
	// waits on the server, so once sent it is not cut by the caller's
	// cancellation, which would break the connection under every other
	// Session on it: it is bounded by sharedTryTimeout (and by the
	// connection's keepalive, see keepalive), and by endGrace once ctx has
	// ended (a server that stopped answering). No lock statement of it
	// starts once the phase is over.
	var ok bool
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sharedTryTimeout(o.Cfg.Keepalive))
	defer cancel()
	err = c.run(ctx, sctx, func(sctx context.Context) error {
		return withinGrace(ctx, cancel, func() error {
			var err error
			ok, err = c.lock(sctx, o, res, ph, probe)
			return err
		})
	})
	if err != nil && !errors.Is(err, errNoTurn) && !errors.Is(err, errPhaseOver) {
		p.kill(c, err, nil)
	}
	if err != nil || !ok {
		p.leaveLocks(c, res)
		return nil, false, err
	}
	o.reserved = res
	return c, true, nil
}

// lock sends o's try-locks of res on c, while the phase lasts: o's
// one key, or the items of its shape in order, given back when one is
// refused or the phase ends first.
func (c *sharedConn) lock(ctx context.Context, o *Op, res []localLock, ph lockPhase, probe *slotProbe) (bool, error) {
	if !o.target.Simple() {
		return o.held.sharedTry(ctx, o.target.mech, c, o.target.itemsOf(res), ph, probe)
	}
	if ph.over() {
		return false, nil
	}
	return o.target.mech.tryKey(ctx, o, c.conn)
}

// tryKey on MySQL/MariaDB: GET_LOCK without a wait, and the owner row.
func (mysqlNamed) tryKey(ctx context.Context, o *Op, q *sql.Conn) (bool, error) {
	ok, err := MySQLGetLock(ctx, q, o.target.mysql, 0)
	if ok && err == nil {
		mysqlMech.recordOwner(ctx, o, q)
	}
	return ok, err
}

// sharedTryTimeout bounds one statement on a shared connection (a
// try-lock, a keepalive check): two keepalive intervals, and never under
// 2 s, since a statement that times out costs every lock on the
// connection (a server slow under load is not a dead one). A connection
// that died fails at once, whatever the bound.
func sharedTryTimeout(keepalive time.Duration) time.Duration {
	return max(2*keepalive, 2*time.Second)
}

// tryKey on PostgreSQL: pg_try_advisory_lock.
func (pgAdvisory) tryKey(ctx context.Context, o *Op, q *sql.Conn) (bool, error) {
	var ok bool
	params, args := pgKeyParams(o.target.pg)
	err := q.QueryRowContext(ctx, "SELECT pg_try_advisory_lock"+params, args...).Scan(&ok)
	return ok, errs.Wrap(err, "pg_try_advisory_lock")
}

// unlock releases o's session-level lock on c, waiting for its turn
// as long as ctx (a release context) allows.
func (c *sharedConn) unlock(ctx context.Context, o *Op) error {
	return c.run(ctx, ctx, func(ctx context.Context) error {
		if !o.target.Simple() {
			return o.held.sharedUndo(ctx, o.target.mech, c)
		}
		return o.target.mech.unlockKey(ctx, o, c.conn)
	})
}

// unlockKey on MySQL/MariaDB: RELEASE_LOCK, after the owner row tryKey
// wrote, if any (a shape's items on a shared connection write none).
func (mysqlNamed) unlockKey(ctx context.Context, o *Op, q Querier) error {
	mysqlMech.forgetOwner(ctx, o, q)
	return MySQLReleaseLock(ctx, q, o.target.mysql)
}

// unlockKey on PostgreSQL: pg_advisory_unlock.
func (pgAdvisory) unlockKey(ctx context.Context, o *Op, q Querier) error {
	var ok bool
	params, args := pgKeyParams(o.target.pg)
	if err := q.QueryRowContext(ctx, "SELECT pg_advisory_unlock"+params, args...).Scan(&ok); err != nil {
		return errs.Wrap(err, "pg_advisory_unlock")
	}
	if !ok {
		return fmt.Errorf("%w: pg_advisory_unlock returned false", ErrNotHeld)
	}
	return nil
}

// token issues o's fencing token of a lock held on c (a no-op
// without WithFencing): on the pool on PostgreSQL, on c itself on
// MySQL/MariaDB (as Session does). On failure the lock is released.
func (p *sharedPool) token(ctx context.Context, o *Op, db *sql.DB, c *sharedConn) error {
	if !o.Cfg.Fencing {
		return nil
	}
	err := o.target.mech.sharedToken(ctx, o, db, c)
	if err == nil {
		return nil
	}
	if rerr := releaseWithin(ctx, func(rctx context.Context) error { return c.unlock(rctx, o) }); rerr != nil {
		p.kill(c, rerr, nil)
		err = errs.Join(err, rerr)
	}
	p.leave(c, o)
	return err
}

// sharedToken on PostgreSQL: issued on the pool, checking that c's
// backend still holds the lock.
func (pgAdvisory) sharedToken(ctx context.Context, o *Op, db *sql.DB, c *sharedConn) error {
	o.fence.pid = c.pid // the issuing statement checks this backend still holds the lock
	return IssueToken(ctx, o, db)
}

// sharedToken on MySQL/MariaDB: issued on c itself, in its turn.
func (mysqlNamed) sharedToken(ctx context.Context, o *Op, db *sql.DB, c *sharedConn) error {
	o.my = c.vars // COMMIT after the token's INSERT only where autocommit is off
	return c.run(ctx, ctx, func(ctx context.Context) error { return IssueToken(ctx, o, c.conn) })
}
