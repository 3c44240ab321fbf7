package lockproto

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ormlock/ormlock/internal/errs"
)

// PostgreSQL: BEGIN and the lock in one message.
//
// With pgx (gorm.io/driver/postgres's driver, and ent's usual one) the
// protocol sends BEGIN and the lock as one simple-protocol query string, so
// a locked transaction costs the round trips of an unlocked one:
//
//	BEGIN ISOLATION LEVEL READ COMMITTED; SELECT pg_try_advisory_xact_lock((-42)::int8)
//
// The key is an integer, written as a literal with strconv, never text from
// a caller. database/sql cannot be told that a transaction is open on a
// connection it did not begin, so the transaction is driven on the pinned
// *sql.Conn itself (OneMessageTx, onemsgtx.go): the caller's statements run
// on that connection, and COMMIT and ROLLBACK are sent by OneMessageTx,
// which checks the server's transaction status afterwards and destroys the
// connection unless it is idle, outside any transaction. Other drivers (lib/pq, anything not pgx),
// GORM's PrepareStmt (its statement cache needs a *sql.Tx) and isolation
// levels database/sql's pgx driver would refuse take the two-message path
// (BEGIN through database/sql, then the lock).

// errNoOneMessage reports that the one-message path does not apply (not a
// pgx connection); nothing was sent.
var errNoOneMessage = errors.New("ormlock: not a pgx connection")

// pgxConner is what pgx's database/sql driver connection (*stdlib.Conn)
// exposes.
type pgxConner interface{ Conn() *pgx.Conn }

// withPgConn runs f on conn's pgx connection, or returns errNoOneMessage.
func withPgConn(conn *sql.Conn, f func(pc *pgconn.PgConn) error) error {
	return conn.Raw(func(dc any) error {
		c, ok := dc.(pgxConner)
		if !ok {
			return errNoOneMessage
		}
		return f(c.Conn().PgConn())
	})
}

// isPgx reports whether conn is a pgx connection, on which the lock can
// travel with BEGIN (lockOneMessage).
func isPgx(conn *sql.Conn) bool {
	return withPgConn(conn, func(*pgconn.PgConn) error { return nil }) == nil
}

// lockTxFor says what the transaction that a lock message begins is for.
type lockTxFor uint8

const (
	// forFn is the caller's transaction, in which fn runs: on a direct
	// connection its try-once lock is the prepared statement (prepared.go).
	forFn lockTxFor = iota
	// forSplit is the split protocol's lock-only transaction (split.go).
	forSplit
	// forSession is a Session's lock-only transaction: the message also
	// turns transaction_timeout off and reads
	// idle_in_transaction_session_timeout (see pgLockMessage).
	forSession
)

// lockOneMessage begins a transaction with begin on the pinned pgx
// connection conn (see isPgx) and takes o's lock in the same message (see
// pgLockMessage; for fn's transaction a try-once lock may be the prepared
// statement, see pgTryStmt). On success it returns the transaction, which
// owns conn from then on, and for a Session the session's
// idle_in_transaction_session_timeout; on failure conn has been given back
// (its transaction ended: ROLLBACK confirmed by the server) or destroyed,
// and the error is classified as AcquireXact's.
func (o *Op) lockOneMessage(ctx context.Context, db *sql.DB, conn pinned, begin string, use lockTxFor) (*OneMessageTx, time.Duration, error) {
	wait, bounded, err := o.attempt(ctx)
	if err != nil {
		conn.giveBack() // nothing was sent
		return nil, 0, err
	}
	done := func() {}
	long := use == forSession
	wantIso := !strings.Contains(begin, "ISOLATION")
	x := &lockExchange{}
	err = conn.withPg(func(pc *pgconn.PgConn) error {
		x.pc = pc
		// a cancellation asks the server to end the statement, which
		// leaves nothing waiting there (see stmtCtx)
		x.ctx, done = stmtCtx(ctx, wait > 0, pc.CancelRequest)
		var ps *pgConnState
		if use == forFn && wait == 0 && o.target.Simple() {
			ps = pgConnStateOf(pc)
		}
		if ps == nil || (ps.known && !ps.direct) {
			// with fencing the message reads the backend's pid, which the
			// token's issuance checks (fence.go)
			fence := o.Cfg.Fencing
			err := x.send(pgLockMessage(begin, o.target.pg, o.target.kind == kindShared, wait, long, fence), lockLayout{wait: wait > 0, long: long, iso: wantIso, pid: fence})
			o.lockPID = x.rep.pid
			return err
		}
		if !ps.known {
			// the first lock on this connection: as text, with the pid
			err := x.send(pgLockMessage(begin, o.target.pg, false, 0, false, true), lockLayout{iso: wantIso, pid: true})
			if err == nil {
				ps.known, ps.direct = true, x.rep.pid != 0 && x.rep.pid == pc.PID()
			}
			o.lockPID = x.rep.pid
			return err
		}
		return o.lockPrepared(x, ps, begin)
	})
	rep, status := x.rep, x.status
	done()
	ok := rep.ok
	if err != nil && wait > 0 && SQLState(err) == sqlStateLockNotAvailable {
		err = nil // lock_timeout expired: held elsewhere
	}
	if err == nil && ok && status != 'T' {
		err = fmt.Errorf("transaction status %q after the lock", status)
	}
	if err != nil {
		err = errs.Wrap(err, "BEGIN and pg_advisory_xact_lock")
	} else if ok && ctx.Err() != nil {
		// the lock came as the caller gave up: given back below, by a
		// ROLLBACK the server confirms
		ok, err = false, ctx.Err()
	}
	txCtx, txCancel := txContext(ctx)
	tx := &OneMessageTx{pin: conn, conn: conn.sqlConn(), db: db, ctx: txCtx, cancel: txCancel}
	if wantIso {
		tx.snapDefault = rep.level
	}
	if err == nil && ok {
		return tx, rep.idle, o.settle(ctx, true, bounded, nil)
	}
	// Not acquired, or failed: end the transaction the message began. The
	// connection goes back to the pool only when the server confirms it is
	// outside any transaction (OneMessageTx.end).
	if status == 'I' && err == nil {
		tx.markDone()
		txCancel()
		conn.giveBack()
	} else {
		_ = withinGrace(ctx, txCancel, tx.Rollback)
	}
	return nil, 0, o.settle(ctx, false, bounded, err)
}

// pgCancelOf returns the CancelRequest of conn's pgx connection (see
// stmtCtx), nil when conn is not pgx's. The caller keeps conn pinned while
// it may call it.
func pgCancelOf(conn *sql.Conn) serverCancel { return pinCancel(sqlPin{conn}) }

// pinCancel is pgCancelOf for a pinned connection of either kind.
func pinCancel(conn pinned) serverCancel {
	var sc serverCancel
	_ = conn.withPg(func(pc *pgconn.PgConn) error {
		sc = pc.CancelRequest
		return nil
	})
	return sc
}

// lockExchange sends lock messages on one pgx connection, keeping the reply
// to the last one and the transaction status after it.
type lockExchange struct {
	ctx    context.Context
	pc     *pgconn.PgConn
	rep    lockReply
	status byte
}

// send sends msg and reads its reply, whose last row is laid out as l says.
func (x *lockExchange) send(msg string, l lockLayout) error {
	var err error
	x.rep, err = readLockReply(x.pc.Exec(x.ctx, msg), l)
	x.status = x.pc.TxStatus()
	if err == nil && x.pc.IsClosed() {
		err = errors.New("connection closed")
	}
	return err
}
