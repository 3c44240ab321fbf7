package lockproto

import (
	"context"
	"time"

	"github.com/ormlock/ormlock/internal/errs"
)

// leaseLostGrace bounds the whole release of a lease known lost (a
// renewal found its row taken, or its own deadline passed): such a
// lease expires by itself at its TTL, so its release is a courtesy that
// a stuck server (a frozen server, a held row lock) must not make the
// verb wait releaseTimeout for.
const leaseLostGrace = time.Second

// free sends the lease's release on every path out of a verb (return,
// error, panic, cancelled ctx, loss), before the verb returns, on a
// context that ignores ctx's cancellation (releaseCtx):
//
//   - the wait for a connection of the pool is bounded by releaseTimeout
//     only, not by the grace: many leases released at once (their callers'
//     common context cancelled) queue for a few connections, and each is
//     still sent;
//   - the statements, once a connection is had, are cut endGrace after
//     ctx ended (withinGrace; endGrace after they start when ctx had
//     already ended), so that a server that stopped answering holds the
//     caller no longer than that past its deadline;
//   - a lease known lost (lost) is released within leaseLostGrace in all.
//
// A release cut short or failed is no loss: the lease expires at its TTL.
func (h *leaseHeld) free(ctx context.Context, lost bool) error {
	rctx, cancel := releaseCtx(ctx)
	defer cancel()
	if lost {
		var lcancel context.CancelFunc
		rctx, lcancel = context.WithTimeout(rctx, leaseLostGrace)
		defer lcancel()
	}
	conn, err := h.db.Conn(rctx)
	if err != nil {
		return errs.Wrap(err, "lease table %s: release %q", h.table, h.o.Key.String())
	}
	defer conn.Close()
	sctx, scancel := context.WithCancel(rctx)
	defer scancel()
	return withinGrace(ctx, scancel, func() error {
		// after the renewals under way, which could otherwise extend
		// the row again (leaserenew.go, board)
		if !h.awaitLanded(sctx) {
			return errs.Wrap(context.Cause(sctx), "lease table %s: release %q: a renewal under way did not end", h.table, h.o.Key.String())
		}
		return h.release(sctx, conn)
	})
}

// release expires the holder's rows on q, by holder id (which names one
// acquisition), each in a statement of its own; in share mode, gives up
// its reader's place in the key row (releaseShared).
func (h *leaseHeld) release(ctx context.Context, q Querier) error {
	if h.shared {
		r := h.rows[0]
		if err := h.m.sql.releaseShared(ctx, q, h.table, r.ns, r.key, h.holder, r.epoch); err != nil {
			return errs.Wrap(err, "lease table %s: release %q", h.table, h.o.Key.String())
		}
		return nil
	}
	stmt := h.m.sql.releaseSQL(h.table)
	var first error
	for _, r := range h.rows {
		if _, err := q.ExecContext(ctx, stmt, r.ns, r.key, r.reader, r.holder); err != nil && first == nil {
			first = errs.Wrap(err, "lease table %s: release %q", h.table, h.o.Key.String())
		}
	}
	return first
}
