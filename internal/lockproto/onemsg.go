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

	"github.com/ormlock/ormlock"
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
// *sql.Conn itself (ConnTx): the caller's statements run on that connection,
// and COMMIT and ROLLBACK are sent by ConnTx, which checks the server's
// transaction status afterwards and destroys the connection unless it is
// idle, outside any transaction. Other drivers (lib/pq, anything not pgx),
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

// lockOneMessage begins a transaction with begin on the pinned pgx
// connection conn (see isPgx) and takes o's lock in the same message (see
// pgLockMessage; with stmt, a try-once lock may be the prepared statement,
// see pgTryStmt). On success it returns the transaction, which owns conn
// from then on, and for a Session (long) the session's
// idle_in_transaction_session_timeout; on failure conn has been given back
// (its transaction ended: ROLLBACK confirmed by the server) or destroyed,
// and the error is classified as AcquireXact's.
func (o *Op) lockOneMessage(ctx context.Context, db *sql.DB, conn *sql.Conn, begin string, long, stmt bool) (*ConnTx, time.Duration, error) {
	o.start = time.Now()
	o.Emit(ctx, ormlock.EventAttempt, nil)
	wait, bounded, err := o.budget(ctx)
	if err != nil {
		_ = conn.Close() // nothing was sent
		return nil, 0, err
	}
	mctx, done := ctx, func() {}
	if wait > 0 {
		mctx, done = waitCtx(ctx)
	}
	wantIso := !strings.Contains(begin, "ISOLATION")
	var (
		rep    lockReply
		status byte
	)
	err = withPgConn(conn, func(pc *pgconn.PgConn) error {
		send := func(msg string, l lockLayout) error {
			var err error
			rep, err = readLockReply(pc.Exec(mctx, msg), l)
			status = pc.TxStatus()
			if err == nil && pc.IsClosed() {
				err = errors.New("connection closed")
			}
			return err
		}
		var ps *pgSession
		if stmt && wait == 0 && !long {
			ps = pgSessionOf(pc)
		}
		if ps == nil || (ps.known && !ps.direct) {
			// with fencing the message reads the backend's pid, which the
			// token's issuance checks (fence.go)
			fence := o.Cfg.Fencing
			err := send(pgLockMessage(begin, o.pg, wait, long, fence), lockLayout{wait: wait > 0, long: long, iso: wantIso, pid: fence})
			o.lockPID = rep.pid
			return err
		}
		if !ps.known {
			// the first lock on this connection: as text, with the pid
			err := send(pgLockMessage(begin, o.pg, 0, false, true), lockLayout{iso: wantIso, pid: true})
			if err == nil {
				ps.known, ps.direct = true, rep.pid != 0 && rep.pid == pc.PID()
			}
			o.lockPID = rep.pid
			return err
		}
		// direct: the backend's pid is the one the connection announced
		o.lockPID = pc.PID()
		i := pgTryIndex(o.pg)
		l := lockLayout{iso: true, mark: true}
		// ours: the answer carries the connection's mark; otherwise, on a
		// connection still in the transaction the message began (status
		// 'T' or 'E'), the statement of that name is not the library's
		// (dropped by the application: DISCARD ALL, DEALLOCATE; or a
		// foreign one): end the transaction, which ends whatever that
		// statement took, drop it and prepare the library's
		ours := func(err error) bool { return err == nil && rep.mark == ps.mark }
		foreign := func() bool { return !pc.IsClosed() && (status == 'T' || status == 'E') }
		drop := func() bool {
			ps.prepared[i] = false
			_, rerr := pc.Exec(mctx, "ROLLBACK; DEALLOCATE "+pgTryStmt[i].name).ReadAll()
			return (rerr == nil || SQLState(rerr) == sqlStateNoStatement) && pc.TxStatus() == 'I'
		}
		if ps.prepared[i] {
			err := send(pgTryMessage(begin, o.pg, false, ps.mark), l)
			if ours(err) || !foreign() {
				return err
			}
			if !drop() {
				return errs.Join(errNotOurStatement, err)
			}
		}
		err := send(pgTryMessage(begin, o.pg, true, ps.mark), l)
		if err != nil && SQLState(err) == sqlStateDupStatement && status == 'E' {
			// a statement of that name the record does not know (a
			// PREPARE whose answer was lost, or a foreign one)
			if !drop() {
				return err
			}
			err = send(pgTryMessage(begin, o.pg, true, ps.mark), l)
		}
		if ours(err) {
			ps.prepared[i] = true
			return nil
		}
		return errs.Join(errNotOurStatement, err)
	})
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
	}
	txCtx, txCancel := txContext(ctx)
	tx := &ConnTx{conn: conn, db: db, ctx: txCtx, cancel: txCancel}
	if wantIso {
		tx.snapDefault = rep.level
	}
	if err == nil && ok {
		return tx, rep.idle, o.settle(ctx, true, bounded, nil)
	}
	// Not acquired, or failed: end the transaction the message began. The
	// connection goes back to the pool only when the server confirms it is
	// outside any transaction (ConnTx.end).
	if status == 'I' && err == nil {
		tx.markDone()
		txCancel()
		_ = conn.Close()
	} else {
		_ = withinGrace(ctx, txCancel, tx.Rollback)
	}
	return nil, 0, o.settle(ctx, false, bounded, err)
}
