package lockproto

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"

	"github.com/ormlock/ormlock/internal/errs"
)

// connGone reports whether err, the failure of a statement that ends a
// transaction (COMMIT, ROLLBACK) or its lock (RELEASE_LOCK), says that the
// connection broke under it, rather than that the server refused the
// statement: no server error (a closed connection, a network error, the
// driver's ErrBadConn or "invalid connection"), or one that ends the
// session (SQLSTATE class 08, 57P01-57P03: administrator command, crash,
// shutdown; any PostgreSQL error of severity FATAL or PANIC, such as
// idle_in_transaction_session_timeout's 25P03 or pgpool-II's XX000 for a
// backend it lost; MariaDB/MySQL 1927 connection killed, 1053 shutdown).
func connGone(err error) bool {
	if err == nil || errors.Is(err, pgDriver.ErrCommitRollback()) || errors.Is(err, sql.ErrTxDone) {
		return false
	}
	if sessionEnded(err) {
		return true
	}
	if st := SQLState(err); st != "" {
		return strings.HasPrefix(st, "08") || st == "57P01" || st == "57P02" || st == "57P03"
	}
	if n := MySQLErrno(err); n != 0 {
		return n == 1927 || n == 1053
	}
	return true
}

// sessionEnded reports whether err is a PostgreSQL error whose severity,
// FATAL or PANIC, means the server ended the session after sending it
// (the registered driver's, PgDriver.SessionEnded: pgx's PgError; lib/pq's
// Error through its Fatal method).
func sessionEnded(err error) bool {
	if pgDriver.SessionEnded(err) {
		return true
	}
	var pq interface{ Fatal() bool }
	return errors.As(err, &pq) && pq.Fatal()
}

// unsent reports whether err says that the statement was never sent (an
// error whose SafeToRetry method says so, as pgx's do; database/sql's
// driver.ErrBadConn, which drivers return only before anything was
// written), so that the server cannot have run it.
func unsent(err error) bool {
	var r interface{ SafeToRetry() bool }
	return errors.As(err, &r) && r.SafeToRetry() || errors.Is(err, driver.ErrBadConn)
}

// lockLost builds the error of a lock whose connection was found gone by
// stmt (err): it wraps errs.ErrLockLost and err, and t.ctx's error when
// t.ctx has ended (the driver may have closed the connection because it
// did).
func (t *LockedTx) lockLost(stmt string, err error) error {
	lerr := errs.Mark(errs.ErrLockLost, err, "%q: the lock's connection was gone at %s", t.op.Key.String(), stmt)
	if cerr := ctxErr(t.ctx); cerr != nil {
		lerr = errs.Join(lerr, cerr)
	}
	return lerr
}
