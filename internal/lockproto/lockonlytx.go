package lockproto

import (
	"context"
	"database/sql"
	"time"
)

// The lock-only transaction: a READ COMMITTED transaction on a pinned
// connection whose only work is to hold the PostgreSQL xact lock, for a
// Session (session.go) and for the split protocol (split.go).

// lockOnlyTx is a READ COMMITTED transaction whose only work is to hold a
// PostgreSQL xact lock, on a pinned connection of its own (Session's lock,
// and the split protocol's); fn never runs in it.
type lockOnlyTx struct {
	conn   pinned
	tx     Tx // a *OneMessageTx with pgx
	cancel context.CancelFunc
	idle   time.Duration // idle_in_transaction_session_timeout, read for a Session
	taken  time.Duration // how far into the transaction the lock came (see heldfor.go)
}

// beginLockOnly begins a READ COMMITTED transaction on conn and takes o's lock
// in it, each wait bounded by ctx; use is forSplit or forSession. A
// Session's first turns transaction_timeout off for that transaction, before the lock so that a
// long wait is not cut by it either (see PGKeepTransaction); the split
// protocol's lock transaction lives no longer than fn's, which the timeout
// bounds anyway. On failure conn has been given back (a clean "held
// elsewhere") or destroyed.
func (pgAdvisory) beginLockOnly(ctx context.Context, o *Op, db *sql.DB, conn pinned, use lockTxFor) (*lockOnlyTx, error) {
	begun := time.Now()
	if o.target.oneMessage() && oneMessageOn(conn) {
		// one message: BEGIN, transaction_timeout off (Session), the lock
		// and (Session) the idle timeout, by the simple protocol, which leaves no
		// portal open: the idle transaction holds no snapshot
		ct, idle, err := pgMech.lockOneMessage(ctx, o, db, conn, "BEGIN ISOLATION LEVEL READ COMMITTED", use)
		if err != nil {
			return nil, err
		}
		return &lockOnlyTx{conn: conn, tx: ct, cancel: ct.cancel, idle: idle, taken: o.acquired.Sub(begun)}, nil
	}
	tx, cancel, err := beginOn(ctx, o, conn.sqlConn(), &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		conn.destroy()
		return nil, err
	}
	lk := &lockOnlyTx{conn: conn, tx: tx, cancel: cancel}
	if use == forSession {
		if err := PGKeepTransaction(ctx, tx); err != nil {
			err = failed(ctx, o, err)
			lk.drop(ctx, err)
			return nil, err
		}
	}
	if err := o.AcquireXact(ctx, tx); err != nil {
		lk.drop(ctx, err)
		return nil, err
	}
	lk.taken = o.acquired.Sub(begun)
	return lk, nil
}

// confirm proves the lock transaction alive, hence the lock held; its
// statement also says when the lock was taken (see heldfor.go).
func (l *lockOnlyTx) confirm(ctx context.Context) error { return pgPingTaken(ctx, l.tx, l.taken) }

// beforeCommit is confirm, before the COMMIT of fn's transaction on
// another connection (the split protocol).
func (l *lockOnlyTx) beforeCommit(ctx context.Context, _ Tx) error { return l.confirm(ctx) }

// rollback ends the lock transaction, bounded by ctx (the release context),
// which also cancels the transaction's own context should it end first.
func (l *lockOnlyTx) rollback(ctx context.Context) error {
	defer l.cancel()
	stop := context.AfterFunc(ctx, l.cancel)
	defer stop()
	return l.tx.Rollback()
}

// end releases the lock (ROLLBACK, bounded as releaseWithin says) and gives the
// connection back, or destroys it when the ROLLBACK failed.
func (l *lockOnlyTx) end(ctx context.Context) error {
	if err := releaseWithin(ctx, l.rollback); err != nil {
		l.conn.destroy()
		return err
	}
	l.conn.giveBack()
	return nil
}

// drop ends a lock transaction whose lock was not taken (err says why).
func (l *lockOnlyTx) drop(ctx context.Context, err error) {
	if releaseWithin(ctx, l.rollback) != nil || !cleanNotAcquired(err) {
		l.conn.destroy()
		return
	}
	l.conn.giveBack()
}
