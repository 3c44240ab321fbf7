package lockproto

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ormlock/ormlock"
)

// holder is a lock held on a dedicated connection for a Session.
type holder struct {
	conn    *sql.Conn
	ping    func(ctx context.Context) error
	release func(ctx context.Context) error
	every   time.Duration
}

// Session holds the lock on a connection pinned from db, for as long as fn
// runs, while fn itself uses the normal pool through its context.
//
// PostgreSQL: the lock is a transaction-level advisory lock taken in a READ
// COMMITTED transaction that stays idle on the pinned connection. Unlike a
// session-level lock it is correct behind PgBouncer in transaction pooling
// mode (the server connection stays with the transaction), and an idle READ
// COMMITTED transaction with no open portal holds no snapshot, so it does not
// hold back VACUUM. The keepalive is kept under a third of the server's
// idle_in_transaction_session_timeout; should the server end the transaction
// anyway, that is reported as a lost lock. Release is a ROLLBACK.
//
// MySQL/MariaDB: GET_LOCK on the pinned connection, whose wait_timeout is
// raised first so an idle timeout cannot drop the lock; the keepalive checks
// IS_USED_LOCK(name) = CONNECTION_ID(). Release is RELEASE_LOCK.
//
// A keepalive runs every Cfg.Keepalive with a timeout of one interval; when it
// fails, fn's context is cancelled with cause ormlock.ErrLockLost, so loss is
// seen within two intervals, and Session returns an error wrapping
// ormlock.ErrLockLost (joined with fn's error). A release that fails or
// cannot be confirmed destroys the connection and is reported the same way,
// since the lock may have gone before fn finished.
func (o *Op) Session(ctx context.Context, db *sql.DB, fn func(ctx context.Context) error) (err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return o.failed(ctx, fmt.Errorf("ormlock: pin a connection: %w", err))
	}
	var h *holder
	switch o.D {
	case Postgres:
		h, err = o.holdPostgres(ctx, conn)
	case MySQL:
		h, err = o.holdMySQL(ctx, conn)
	}
	if err != nil {
		return err
	}

	lctx, cancel := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	var lost atomic.Pointer[error]
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(h.every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			pctx, pcancel := context.WithTimeout(context.WithoutCancel(ctx), h.every)
			perr := h.ping(pctx)
			pcancel()
			if perr != nil {
				select {
				case <-stop: // fn already returned; release will tell
					return
				default:
				}
				lost.Store(&perr)
				o.Emit(ctx, ormlock.EventLockLost, perr)
				cancel(ormlock.ErrLockLost)
				return
			}
		}
	})

	defer func() {
		close(stop)
		wg.Wait()
		cancel(context.Canceled)
		lostErr := lost.Load()
		rctx, rcancel := releaseCtx(ctx)
		rerr := h.release(rctx)
		rcancel()
		if rerr != nil {
			Destroy(conn)
			if lostErr == nil {
				o.Emit(ctx, ormlock.EventReleaseFailed, rerr)
				lostErr = &rerr
			}
		} else {
			_ = conn.Close()
			o.Emit(ctx, ormlock.EventReleased, nil)
		}
		if lostErr != nil {
			lerr := fmt.Errorf("%w: %q: %w", ormlock.ErrLockLost, o.Key.String(), *lostErr)
			if err != nil {
				err = errors.Join(lerr, err)
			} else {
				err = lerr
			}
		}
	}()
	return fn(lctx)
}

func (o *Op) holdPostgres(ctx context.Context, conn *sql.Conn) (*holder, error) {
	// The transaction must outlive ctx: database/sql rolls back a transaction
	// whose context ends, which would drop the lock under a running fn.
	tx, err := conn.BeginTx(context.WithoutCancel(ctx), &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		Destroy(conn)
		return nil, o.failed(ctx, fmt.Errorf("ormlock: begin lock transaction: %w", err))
	}
	fail := func(err error) (*holder, error) {
		if rerr := tx.Rollback(); rerr != nil || isCtxErr(err) || !errors.Is(err, ormlock.ErrNotAcquired) {
			Destroy(conn)
		} else {
			_ = conn.Close()
		}
		return nil, err
	}
	if err := o.AcquireXact(ctx, tx); err != nil {
		return fail(err)
	}
	idle, err := PGIdleTimeout(ctx, tx)
	if err == nil {
		// A statement without arguments goes by the simple protocol and
		// closes the portal the queries above left open, which would
		// otherwise pin a snapshot (backend_xmin) while fn runs.
		err = PGPing(ctx, tx)
	}
	if err != nil {
		return fail(o.failed(ctx, err))
	}
	every := o.Cfg.Keepalive
	if idle > 0 && every > idle/3 {
		every = max(idle/3, time.Millisecond)
	}
	return &holder{
		conn:    conn,
		ping:    func(ctx context.Context) error { return PGPing(ctx, tx) },
		release: func(context.Context) error { return tx.Rollback() },
		every:   every,
	}, nil
}

func (o *Op) holdMySQL(ctx context.Context, conn *sql.Conn) (*holder, error) {
	if err := MySQLKeepSession(ctx, conn, 10*o.Cfg.Keepalive); err != nil {
		Destroy(conn)
		return nil, o.failed(ctx, err)
	}
	if err := o.AcquireNamed(ctx, conn); err != nil {
		o.dropUnlocked(conn, err)
		return nil, err
	}
	name := o.mysql
	return &holder{
		conn:    conn,
		ping:    func(ctx context.Context) error { return MySQLHeld(ctx, conn, name) },
		release: func(ctx context.Context) error { return MySQLReleaseLock(ctx, conn, name) },
		every:   o.Cfg.Keepalive,
	}, nil
}
