package lockproto

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
)

// sessionHold is a lock held on a dedicated connection for a Session.
type sessionHold struct {
	// ping confirms that the lock is still held; release gives it up. Both
	// run on the dedicated connection, never at the same time.
	ping    func(ctx context.Context) error
	release func(ctx context.Context) error
	// every is the keepalive interval, and the timeout of one ping.
	every time.Duration
}

// Session holds the lock on a connection pinned from db, for as long as fn
// runs, while fn itself uses the normal pool through its context.
//
// PostgreSQL: the lock is a transaction-level advisory lock taken in a READ
// COMMITTED transaction that stays idle on the pinned connection. Unlike a
// session-level lock it is correct behind PgBouncer in transaction pooling
// mode (the server connection stays with the transaction), and an idle READ
// COMMITTED transaction with no open portal holds no snapshot, so it does not
// hold back VACUUM. With pgx the set-up is one simple-protocol message
// (BEGIN, transaction_timeout off, the lock, the idle timeout read: see
// pgLockMessage), whose portals close with it; with other drivers the last
// statement before the transaction goes idle is one without arguments, sent
// by the simple protocol, which closes the unnamed portal an
// extended-protocol lock query leaves open and which would otherwise keep
// backend_xmin set. The keepalive, "SELECT 1" on
// the lock transaction, proves the transaction is alive, hence the lock
// held: an aborted transaction (which has dropped its locks) fails it. The
// interval is kept under a third of the session's
// idle_in_transaction_session_timeout, read when the lock is taken; should
// the server end the transaction anyway (the timeout lowered later, a
// PgBouncer idle_transaction_timeout, which the server cannot show), that is
// a lost lock. PostgreSQL 17's transaction_timeout, which would end the
// transaction however busy its keepalive, is set to 0 for the lock
// transaction alone (see PGKeepTransaction). Release is a ROLLBACK.
//
// MySQL/MariaDB: GET_LOCK on the pinned connection, whose wait_timeout is
// first raised (never lowered) to at least a minute and ten intervals, so an
// idle timeout shorter than the keepalive cannot drop the lock; a raised
// value is set back to the connection's own previous one (from the DSN, the
// application or the server default) before the connection goes back to the
// pool. The
// keepalive checks IS_USED_LOCK(name) = CONNECTION_ID(). Release is
// RELEASE_LOCK, which must return 1.
//
// The keepalive runs every interval (Cfg.Keepalive, clamped as above) on its
// own goroutine, with a timeout of one interval per check and a context that
// ignores the caller's cancellation. When a check fails, fn's context is
// cancelled with cause errs.ErrLockLost, so loss is seen within two
// intervals (a dead connection fails at the next check; a hung one times out
// by the end of it), and Session returns an error wrapping
// errs.ErrLockLost, joined with fn's own error when fn returned one (such
// as ctx.Err()). The caller cancelling ctx ends fn's context with the
// caller's cause and is not a loss.
//
// Races and end of fn: once fn returns (or panics), the keepalive is stopped
// and waited for before the release, so the two never share the connection.
// A check that began while fn ran and then failed counts as a loss even if
// fn returned meanwhile: the lock may have gone before fn finished. A loss
// nobody checked for (the connection killed after the last check) is found
// by the release: a release that fails or is not confirmed destroys the
// connection, so the server frees whatever it held and it never goes back
// to the pool, and is reported as errs.ErrLockLost too. The release runs
// on every path, a panic included (the panic then goes on), with a context
// that ignores the caller's cancellation, bounded by releaseTimeout and by
// endGrace after the caller's context ended (see releaseWithin), so a
// server that stopped answering cannot hold the caller past its deadline.
//
// The pinned connection counts against db's MaxOpenConns while fn runs.
func (o *Op) Session(ctx context.Context, db *sql.DB, fn func(ctx context.Context) error) (err error) {
	if s, ok := o.target.mech.(ownSession); ok {
		return s.session(ctx, o, db, fn) // a lease: no connection is held
	}
	if o.Cfg.SharedConns > 0 {
		db := sharedDB(o, db)
		if err := CheckFence(o, db); err != nil {
			return err
		}
		return sharedPoolOf(db).session(ctx, o, db, fn) // sharedlock.go
	}
	native := poolNative(o, db)
	if o.Cfg.Fencing || !native {
		db = sqlDB(o, db) // else nil with o.LockConns: opened only if needed
	}
	if err := CheckFence(o, db); err != nil {
		return err
	}
	conn, err := pinLock(ctx, o, db, native)
	if err != nil {
		return err
	}
	h, err := o.target.mech.hold(ctx, o, db, conn)
	if err != nil {
		return err
	}
	if err := sessionToken(ctx, o, db, conn, h); err != nil {
		return err
	}

	fctx, cancel := context.WithCancelCause(tokenContext(ctx, o))
	stop := make(chan struct{})
	var (
		lost error // the failed check, if any: written by the keepalive, read after wg.Wait
		wg   sync.WaitGroup
	)
	wg.Go(func() { lost = h.keepalive(ctx, o, stop, cancel) })

	defer func() {
		close(stop)
		wg.Wait()
		cancel(context.Canceled)
		if lostErr := h.end(ctx, o, conn, lost); lostErr != nil {
			lerr := errs.Mark(errs.ErrLockLost, lostErr, "%q", o.Key.String())
			if err != nil {
				err = errs.Join(lerr, err)
			} else {
				err = lerr
			}
		}
	}()
	return fn(fctx)
}

// keepalive checks h, o's lock, every interval until stop is closed. A
// failed check cancels fn's context (cancel) with cause errs.ErrLockLost,
// then tells the observer, and is returned; nil once stopped.
func (h *sessionHold) keepalive(ctx context.Context, o *Op, stop <-chan struct{}, cancel context.CancelCauseFunc) error {
	kctx := keepaliveContext(ctx, o) // the hook's, without the caller's span (event.go)
	t := time.NewTicker(h.every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return nil
		case <-t.C:
		}
		select {
		case <-stop: // fn returned as the tick came: no check needed
			return nil
		default:
		}
		pctx, pcancel := context.WithTimeout(kctx, h.every)
		perr := h.ping(pctx)
		pcancel()
		if perr != nil {
			// fn hears of the loss first; then the observer, whose
			// panic Emit contains (it would end the process here)
			cancel(errs.ErrLockLost)
			o.Emit(ctx, config.EventLockLost, perr)
			return perr
		}
	}
}

// end releases h, o's lock, once fn has returned and the keepalive has
// stopped (lost: its failed check, if any), gives conn back or destroys it,
// and returns what lost the lock: lost, or the failed release.
func (h *sessionHold) end(ctx context.Context, o *Op, conn pinned, lost error) error {
	rerr := releaseWithin(ctx, h.release)
	switch {
	case rerr != nil:
		conn.destroy()
		if lost == nil {
			o.Emit(ctx, config.EventReleaseFailed, rerr)
			lost = rerr
		}
	case lost != nil:
		// The check failed but the connection survived (a PostgreSQL
		// transaction aborted by an error, which drops its locks): the
		// release ended the transaction; the loss stands.
		conn.giveBack()
	default:
		conn.giveBack()
		o.Emit(ctx, config.EventReleased, nil)
	}
	return lost
}

// hold is Session's lock on PostgreSQL: a READ COMMITTED lock-only
// transaction on conn, kept open while fn runs.
func (pgAdvisory) hold(ctx context.Context, o *Op, db *sql.DB, conn pinned) (*sessionHold, error) {
	// The lock transaction outlives ctx (database/sql rolls back a
	// transaction whose context ends, which would drop the lock under a
	// running fn), but BEGIN and the lock are bounded by ctx: see beginLockOnly.
	lk, err := pgMech.beginLockOnly(ctx, o, db, conn, forSession)
	if err != nil {
		return nil, err
	}
	idle := lk.idle
	if _, one := lk.tx.(*OneMessageTx); !one {
		idle, err = PGIdleTimeout(ctx, lk.tx)
		if err == nil {
			// A statement without arguments goes by the simple protocol and
			// closes the portal the queries above left open, which would
			// otherwise pin a snapshot (backend_xmin) while fn runs.
			err = lk.confirm(ctx)
		}
		if err != nil {
			err = failed(ctx, o, err)
			lk.drop(ctx, err)
			return nil, err
		}
	}
	octx, done := stmtCtx(ctx, false, pinCancel(conn))
	err = pgMech.setOwner(octx, o, lk.tx)
	done()
	if err != nil {
		err = failed(ctx, o, err)
		lk.drop(ctx, err)
		return nil, err
	}
	every := o.Cfg.Keepalive
	if idle > 0 && every > idle/3 {
		every = max(idle/3, time.Millisecond)
	}
	return &sessionHold{
		ping:    lk.confirm,
		release: lk.rollback,
		every:   every,
	}, nil
}

// hold is Session's lock on MySQL/MariaDB: GET_LOCK on conn, its session
// kept alive while fn runs.
func (mysqlNamed) hold(ctx context.Context, o *Op, db *sql.DB, pin pinned) (*sessionHold, error) {
	conn := pin.sqlConn()
	prev, err := MySQLKeepSession(ctx, conn, 10*o.Cfg.Keepalive)
	if err != nil {
		Destroy(conn)
		return nil, failed(ctx, o, err)
	}
	o.cancel = mysqlMech.canceller(ctx, o, db, conn) // a cancellation asks the server (stmtCtx)
	err = mysqlMech.acquire(ctx, o, conn)
	o.cancel = nil
	if err != nil {
		if MySQLRestoreSession(ctx, conn, prev) != nil {
			Destroy(conn)
			return nil, err
		}
		dropUnlocked(conn, err)
		return nil, err
	}
	mysqlMech.recordOwner(ctx, o, conn)
	return &sessionHold{
		ping: func(ctx context.Context) error { return mysqlMech.check(ctx, o, conn) },
		release: func(ctx context.Context) error {
			if err := mysqlMech.release(ctx, o, conn); err != nil {
				return err
			}
			// a failure here destroys the connection, like a failed release
			return MySQLRestoreSession(ctx, conn, prev)
		},
		every: o.Cfg.Keepalive,
	}, nil
}
