package lockproto

import (
	"context"
	"errors"
	"sync"
	"time"
)

// The deadline rules, in one place. The caller's context bounds every wait
// of the protocol, never the lock's hold:
//
//   - the lock wait: budget cuts the configured wait to ctx's deadline, and
//     the server bounds it (lock_timeout, GET_LOCK's timeout); waitCtx
//     cancels the statement at once on an explicit cancellation, and only
//     deadlineGrace after a deadline;
//   - a shape's several lock statements: one lock phase (lockPhase) that
//     ctx and the wait end, after which none is sent;
//   - the transaction: begun with txContext (ctx's values, not its
//     cancellation), whose cancel bound arms around BEGIN and the lock;
//     COMMIT and ROLLBACK are cut endGrace after ctx ended (withinGrace);
//   - the release: on releaseCtx (bounded by releaseTimeout, never by the
//     caller's cancellation), also cut endGrace after ctx ended
//     (releaseWithin); txReleaseCtx spares a context that never ends the
//     bound.

// The lock phase of a shape (All, Semaphore: several lock statements) is
// bounded as a whole, not statement by statement: it ends when the
// caller's context ends or, with a wait, when the wait's budget is spent.
// From then on no lock statement is sent and the locks taken are given
// back; on MySQL/MariaDB the statement under way and those releases share
// one grace, cut endGrace after the phase ended (lockPhase.graceCtx).

// lockPhase is the span in which a shape may send lock statements.
type lockPhase struct {
	ctx context.Context
	end time.Time // the wait's end; zero: try-once, only ctx ends the phase
}

// phase is o's lock phase for a wait of wait (0: try-once), from o.start.
func (o *Op) phase(ctx context.Context, wait time.Duration) lockPhase {
	ph := lockPhase{ctx: ctx}
	if wait > 0 {
		ph.end = o.start.Add(wait)
	}
	return ph
}

// over reports whether the phase has ended: no lock statement may start.
func (ph lockPhase) over() bool {
	return ph.ctx.Err() != nil || (!ph.end.IsZero() && !time.Now().Before(ph.end))
}

// graceCtx is the context of the phase's statements on a connection that
// must not be cut mid-statement lightly (a GET_LOCK under way, the
// releases of the locks taken): the phase's values without its end, cut
// endGrace after the phase ended (GraceCtx of the phase). done releases
// it.
func (ph lockPhase) graceCtx() (context.Context, func()) {
	ctx, cancel := ph.ctx, context.CancelFunc(func() {})
	if !ph.end.IsZero() {
		ctx, cancel = context.WithDeadline(ctx, ph.end)
	}
	gctx, done := GraceCtx(ctx)
	return gctx, func() {
		done()
		cancel()
	}
}

// cutWith returns ctx, also cancelled when bound ends; stop releases it.
func cutWith(ctx, bound context.Context) (context.Context, func()) {
	if bound.Done() == nil {
		return ctx, func() {}
	}
	cctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(bound, cancel)
	return cctx, func() {
		stop()
		cancel()
	}
}

// budget returns how long to wait for the lock: the configured wait, cut
// short by the context's deadline (bounded reports whether it was). A context
// that has already ended yields an error.
func (o *Op) budget(ctx context.Context) (wait time.Duration, bounded bool, err error) {
	if err := ctx.Err(); err != nil {
		return 0, false, notAcquired(ctx, o, err)
	}
	wait = o.Cfg.Wait
	if wait > 0 {
		if dl, ok := ctx.Deadline(); ok {
			if left := time.Until(dl); left < wait {
				if left <= 0 {
					return 0, false, notAcquired(ctx, o, context.DeadlineExceeded)
				}
				wait, bounded = left, true
			}
		}
	}
	return wait, bounded, nil
}

// ctxErr is ctx.Err(), or context.DeadlineExceeded when ctx's deadline has
// passed but its timer has not fired yet: a driver that dialed with that
// deadline (net.Dialer) reports "i/o timeout" a moment before ctx.Err() is
// set, and that timeout is the deadline's.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// deadlineGrace is how long a lock wait may outlive the caller's deadline
// before its statement is cancelled after all (a server that stopped
// answering).
const deadlineGrace = 2 * time.Second

// waitCtx returns the context for a lock statement that waits. The server
// bounds the wait itself (lock_timeout or GET_LOCK's timeout, already cut to
// the caller's deadline), so the statement is not also cut by that deadline:
// the driver would close the connection while the server-side waiter lived
// on and could take the lock after all, for a moment, for nobody. An explicit
// cancellation still interrupts the statement at once; a deadline only after
// deadlineGrace.
//
// A context that is never cancelled (Done returns nil, as for
// context.Background) is returned as it is: it has nothing to detach from,
// and a cancellable copy would only make the driver watch it (go-sql-driver
// hands every statement on a cancellable context to a watcher goroutine).
func waitCtx(ctx context.Context) (context.Context, func()) {
	if ctx.Done() == nil {
		return ctx, func() {}
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			time.AfterFunc(deadlineGrace, cancel) // a no-op once done ran
			return
		}
		cancel()
	})
	return wctx, func() {
		stop()
		cancel()
	}
}

// serverCancel asks the server to cancel the statement running on one
// connection (a PostgreSQL CancelRequest, KILL QUERY on MySQL/MariaDB),
// within ctx.
type serverCancel func(ctx context.Context) error

// stmtCtx returns the context of a lock statement (wait: one that waits,
// else a try-once) on a connection whose server can be asked to cancel it
// (sc; nil: waitCtx for a wait, ctx itself for a try-once, as before). An
// explicit cancellation of ctx asks the server, so that the statement ends
// with the server's answer (cancelled, or the lock if it came first, which
// the caller then gives back) and the connection stays usable: the
// caller's ROLLBACK or release is confirmed, and no waiter outlives the call
// in the server, as one cut by closing its connection would until the
// server noticed (behind PgBouncer, until PgBouncer let go of the server
// connection). The statement's own context is cut, which makes the driver
// close the connection, endGrace after the cancellation when the server has
// not answered by then; after a deadline as waitCtx cuts it (a try-once at
// once). done waits for a cancel request under way, so that it never reaches
// a later statement of the connection.
func stmtCtx(ctx context.Context, wait bool, sc serverCancel) (context.Context, func()) {
	switch {
	case ctx.Done() == nil:
		return ctx, func() {}
	case sc == nil && wait:
		return waitCtx(ctx)
	case sc == nil:
		return ctx, func() {}
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var (
		mu       sync.Mutex
		finished bool
		sent     chan struct{} // closed once the cancel request is done
	)
	stop := context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			if wait {
				time.AfterFunc(deadlineGrace, cancel) // the server's own timeout ends the wait
			} else {
				cancel()
			}
			return
		}
		time.AfterFunc(endGrace, cancel) // a server that does not answer
		mu.Lock()
		defer mu.Unlock()
		if finished {
			return
		}
		sent = make(chan struct{})
		go func() {
			defer close(sent)
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), endGrace)
			defer rcancel()
			_ = sc(rctx)
		}()
	})
	return sctx, func() {
		stop()
		mu.Lock()
		finished = true
		s := sent
		mu.Unlock()
		if s != nil {
			<-s
		}
		cancel()
	}
}

// GraceCtx returns the context of a statement whose effect on the server
// must be known once it returns (a try-once GET_LOCK, a claim-mode ledger
// claim): ctx's values without its cancellation, cut endGrace after ctx
// ended (a server that does not answer). Cutting the statement when ctx
// ends would make the driver close its connection with the statement under
// way, which the server may still run after the caller has returned: a lock
// taken for a connection nobody uses, held until the server notices it
// closed, or a row written behind a later call's back. Such a statement
// answers at once on a healthy server, so it is let finish and the caller
// checks ctx after it. A context that can never end is returned as it is.
func GraceCtx(ctx context.Context) (context.Context, func()) {
	if ctx.Done() == nil {
		return ctx, func() {}
	}
	gctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(endGrace, cancel) }) // a no-op once done ran
	return gctx, func() {
		stop()
		cancel()
	}
}

// txContext returns the context a transaction is begun with: ctx's values
// without its cancellation (database/sql rolls back a transaction whose
// context ends, at once, which would drop a PostgreSQL lock under a running
// fn), and its cancel, which bounds BEGIN, COMMIT and ROLLBACK: database/sql
// and pgx run those with the transaction's context. A context that can
// never end is returned as it is, with nothing to cancel (see waitCtx).
func txContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil {
		return ctx, func() {}
	}
	return context.WithCancel(context.WithoutCancel(ctx))
}

// bound cancels a transaction's context (cancel, from txContext) when ctx
// ends, until stop is called; stop reports false when that already happened.
// It is armed around BEGIN, the lock and COMMIT, never while fn runs.
func bound(ctx context.Context, cancel context.CancelFunc) (stop func() bool) {
	if ctx.Done() == nil {
		return func() bool { return true }
	}
	return context.AfterFunc(ctx, cancel)
}

// endGrace is how long a COMMIT or ROLLBACK may run after the caller's
// context ended before it is cut (a healthy server answers in
// milliseconds): a COMMIT under way when the deadline passes still gets a
// true answer, and a server that stopped answering cannot hold the caller
// longer than this past its deadline.
const endGrace = time.Second

// withinGrace runs end (tx.Commit or tx.Rollback, which database/sql and
// pgx run with the transaction's own context) and cancels that context,
// which makes the driver give up and close the connection, endGrace after
// ctx has ended.
func withinGrace(ctx context.Context, cancel context.CancelFunc, end func() error) error {
	if ctx.Done() == nil {
		return end()
	}
	var (
		mu    sync.Mutex
		timer *time.Timer
		done  bool
	)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			timer = time.AfterFunc(endGrace, cancel)
		}
	})
	err := end()
	stop()
	mu.Lock()
	done = true
	if timer != nil {
		timer.Stop()
	}
	mu.Unlock()
	return err
}

// releaseTimeout bounds a release that runs detached from the caller's
// context, so that a hung server cannot hang the caller; a release that
// times out destroys the connection instead.
const releaseTimeout = 15 * time.Second

// releaseCtx is the context of a release: never the caller's (possibly
// cancelled) context, but its values, bounded by releaseTimeout.
func releaseCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
}

// releaseWithin runs release with a release context (releaseCtx) that is
// also cut endGrace after ctx ends: a healthy server answers a release in
// milliseconds, and one that stopped answering cannot hold the caller
// longer than that past its deadline. A release cut short fails, and its
// caller destroys the connection, which frees the lock with it.
func releaseWithin(ctx context.Context, release func(rctx context.Context) error) error {
	rctx, rcancel := releaseCtx(ctx)
	defer rcancel()
	return withinGrace(ctx, rcancel, func() error { return release(rctx) })
}

// txReleaseCtx is the context of the release that follows a Transaction's
// COMMIT or ROLLBACK on the same connection: releaseCtx, except that a
// caller whose context can never end (context.Background) gets it unchanged
// and no bound, like every statement of its transaction had. A cancellable
// context costs a driver-side watcher per statement (go-sql-driver/mysql),
// which measurably slows this, the common path. Session releases, which
// follow a long idle hold, are always bounded.
func txReleaseCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil {
		return ctx, func() {}
	}
	return releaseCtx(ctx)
}
