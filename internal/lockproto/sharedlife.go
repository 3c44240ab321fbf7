// The life of a shared lock connection (sharedconn.go): its keepalive, the
// holds on it, its death, and the reservations of the locks it carries.

package lockproto

import (
	"context"
	"fmt"
	"time"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
)

// keepalive checks c every interval (see setInterval) until c is closed or
// dies, and cuts a statement on c that runs longer than sharedTryTimeout
// of the interval: the server stopped answering.
func (p *sharedPool) keepalive(c *sharedConn) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		p.mu.Lock()
		every := c.interval
		p.mu.Unlock()
		limit := sharedTryTimeout(every)
		c.smu.Lock()
		since, alive := c.since, c.alive
		c.smu.Unlock()
		now := time.Now()
		next := alive.Add(every)
		if !since.IsZero() { // a statement under way: its answer is the check
			if now.Sub(since) >= limit {
				p.kill(c, fmt.Errorf("%w: no answer on the shared lock connection within %v", ErrNotHeld, limit), nil)
				return
			}
			next = since.Add(limit)
		} else if !now.Before(next) {
			select {
			case c.sem <- struct{}{}:
				p.check(c, limit)
				continue
			default:
				// another statement has just taken its turn: it pokes
				next = now.Add(time.Hour)
			}
		}
		t.Reset(time.Until(next))
		select {
		case <-c.stop:
			return
		case <-c.wake:
		case <-t.C:
		}
	}
}

// check sends c's keepalive check, whose turn the caller has, and kills c
// when it fails.
func (p *sharedPool) check(c *sharedConn, limit time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	sctx, end := c.begin(ctx)
	go func() {
		defer cancel()
		err := PGPing(sctx, c.conn)
		if err != nil {
			p.kill(c, err, nil)
		}
		_ = end(err)
	}()
}

// setInterval sets c's keepalive interval: the shortest of its holders' own
// (on MySQL/MariaDB at most c.most), or the one it was opened with while
// none holds a lock on it. p.mu is held.
func (c *sharedConn) setInterval() {
	every := time.Duration(0)
	for h := range c.held {
		if every == 0 || h.every < every {
			every = h.every
		}
	}
	switch {
	case every == 0:
		every = c.every
	case c.most > 0:
		every = min(every, c.most)
	}
	if every != c.interval {
		c.interval = every
		c.poke()
	}
}

// hold adds h to c's holders, unless c is dead (false). p.mu is held.
func (c *sharedConn) hold(h *sharedHold) bool {
	if c.dead {
		return false
	}
	c.held[h] = time.Now()
	if h.every < c.interval || len(c.held) == 1 {
		c.setInterval()
	}
	return true
}

// unhold removes h from c's holders. p.mu is held.
func (c *sharedConn) unhold(h *sharedHold) {
	if _, ok := c.held[h]; !ok {
		return
	}
	delete(c.held, h)
	if h.every <= c.interval || len(c.held) == 0 {
		c.setInterval()
	}
}

// kill destroys c after a failed statement (err): every Session it
// carried, but (whose release failed and reports it itself), is cancelled
// with cause ErrLockLost, its observer told.
func (p *sharedPool) kill(c *sharedConn, err error, but *sharedHold) {
	p.mu.Lock()
	if c.dead {
		p.mu.Unlock()
		return
	}
	c.dead = true
	close(c.stop)
	p.drop(c)
	var lost []*sharedHold
	for h := range c.held {
		if h != but {
			h.lost = err
			lost = append(lost, h)
		}
	}
	p.mu.Unlock()
	for _, h := range lost {
		// fn hears of the loss first; then the observer
		h.cancel(errs.ErrLockLost)
		h.op.Emit(h.ctx, config.EventLockLost, err)
	}
	c.cut()
	go func() { // the statement under way, cut, ends first
		c.sem <- struct{}{}
		Destroy(c.conn)
	}()
}

// drop removes c from p's connections; p.mu is held.
func (p *sharedPool) drop(c *sharedConn) {
	for i, x := range p.conns {
		if x == c {
			p.conns = append(p.conns[:i], p.conns[i+1:]...)
			return
		}
	}
}

// reserve marks the locks ls as held in this process, all or none: false
// when one is held here already (an exclusive lock by anyone, a shared one
// by an exclusive holder). Session-level locks are reentrant on one
// backend, so the server would grant them again to another Session on the
// same connection.
func (p *sharedPool) reserve(ls []localLock) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range ls {
		if n := p.held[l.key]; n < 0 || (n > 0 && !l.shared) {
			return false
		}
	}
	for _, l := range ls {
		if l.shared {
			p.held[l.key]++
		} else {
			p.held[l.key] = -1
		}
	}
	return true
}

// unreserve gives back what reserve marked; p.mu is held.
func (p *sharedPool) freeLocked(ls []localLock) {
	for _, l := range ls {
		if n := p.held[l.key]; n > 1 {
			p.held[l.key] = n - 1
		} else {
			delete(p.held, l.key)
		}
	}
}

func (p *sharedPool) unreserve(ls []localLock) {
	p.mu.Lock()
	p.freeLocked(ls)
	p.mu.Unlock()
}

// leave ends o's use of c (a try or a hold): the locks it reserved are
// free again in this process, and c, once nobody uses it, goes back to the
// pool.
func (p *sharedPool) leave(c *sharedConn, o *Op) { p.leaveLocks(c, o.reserved) }

// leaveLocks is leave for the reservation ls.
func (p *sharedPool) leaveLocks(c *sharedConn, ls []localLock) {
	p.mu.Lock()
	p.freeLocked(ls)
	c.users--
	idle := c.users == 0 && !c.dead
	if idle {
		c.dead = true // closed: no longer picked
		close(c.stop)
		p.drop(c)
	}
	p.mu.Unlock()
	if !idle {
		return
	}
	select {
	case c.sem <- struct{}{}:
	default:
		// nobody uses c any more, but the keepalive's check is under way:
		// its answer is not needed, and a server that stopped answering
		// must not hold the caller
		c.cut()
		c.sem <- struct{}{}
	}
	rctx, cancel := releaseCtx(context.Background())
	defer cancel()
	var err error
	if c.named {
		_, err = c.conn.ExecContext(rctx, "RESET application_name")
	} else {
		err = MySQLRestoreSession(rctx, c.conn, c.prev)
	}
	if err != nil {
		Destroy(c.conn)
		return
	}
	_ = c.conn.Close()
}
