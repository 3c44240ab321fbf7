package lockproto

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ormlock/ormlock/internal/errs"
)

// The MySQL/MariaDB statements of the named lock (GET_LOCK, RELEASE_LOCK,
// IS_USED_LOCK) and of the lock connection's session settings.

// errGetLockNull is GET_LOCK's NULL: the statement was interrupted (KILL
// QUERY, max_statement_time) or failed; the lock was not taken.
var errGetLockNull = errors.New("ormlock: GET_LOCK returned NULL (interrupted: KILL QUERY or max_statement_time)")

// MySQLGetLock runs GET_LOCK(name, timeout) on the pinned connection q. A
// result of 1 is acquired, 0 is held elsewhere (timeout); NULL (an error such
// as a killed query) is never "acquired" and is returned as an error.
func MySQLGetLock(ctx context.Context, q Querier, name string, wait time.Duration) (bool, error) {
	return mysqlGetLock(ctx, q, name, wait, nil)
}

// mysqlLockConnVars are the lock connection's session variables that
// GET_LOCK's statement read with the lock (mysqlGetLock).
type mysqlLockConnVars struct {
	autocommit     int64
	completionType string // NO_CHAIN, CHAIN or RELEASE
	// restoreCT: completion_type was set to 0 for a Transaction and is set
	// back to completionType after the release (mysqlNamed.releaseOn)
	restoreCT bool
}

// mysqlGetLock is MySQLGetLock; with sess, the same statement reads the
// session's @@autocommit (a fenced token's INSERT is committed explicitly
// when it is 0: see fence.go) and @@completion_type (a Transaction sets it
// to 0 for its transaction when it is not: see mysqlNamed.beginLocked) into it.
func mysqlGetLock(ctx context.Context, q Querier, name string, wait time.Duration, sess *mysqlLockConnVars) (bool, error) {
	return mysqlGetLockProbe(ctx, q, name, wait, sess, nil)
}

// mysqlGetLockProbe is mysqlGetLock; with probe, the same statement also
// asks whether probe's lock is held (IS_USED_LOCK: no round trip more).
func mysqlGetLockProbe(ctx context.Context, q Querier, name string, wait time.Duration, sess *mysqlLockConnVars, probe *slotProbe) (bool, error) {
	var res sql.NullInt64
	var err error
	dest, col := []any{&res}, ""
	if sess != nil {
		dest, col = append(dest, &sess.autocommit, &sess.completionType), ", @@autocommit, @@completion_type"
	}
	switch {
	case probe != nil:
		query, args := "SELECT GET_LOCK(?, 0)"+col, []any{name}
		if wait > 0 {
			query, args = "SELECT GET_LOCK(?, ?)"+col, append(args, wait.Seconds())
		}
		err = q.QueryRowContext(ctx, query+", IS_USED_LOCK(?) IS NOT NULL", append(args, probe.it.mysql)...).Scan(append(dest, &probe.seen)...)
	case wait <= 0:
		err = q.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)"+col, name).Scan(dest...)
	default:
		err = q.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)"+col, name, wait.Seconds()).Scan(dest...)
	}
	if err != nil {
		return false, errs.Wrap(err, "GET_LOCK")
	}
	if !res.Valid {
		return false, errGetLockNull
	}
	return res.Int64 == 1, nil
}

// ErrNotHeld is returned by MySQLReleaseLock when the server says the lock
// was not held by this connection (RELEASE_LOCK returned 0 or NULL).
var ErrNotHeld = errors.New("ormlock: lock was not held by this connection")

// MySQLReleaseLock runs RELEASE_LOCK(name) on the pinned connection q. Any
// result but 1 is an error: 0 (held by another connection) and NULL (no such
// lock) wrap ErrNotHeld.
func MySQLReleaseLock(ctx context.Context, q Querier, name string) error {
	var res sql.NullInt64
	if err := q.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", name).Scan(&res); err != nil {
		return errs.Wrap(err, "RELEASE_LOCK")
	}
	if !res.Valid {
		return fmt.Errorf("%w: RELEASE_LOCK returned NULL (no such lock)", ErrNotHeld)
	}
	if res.Int64 != 1 {
		return fmt.Errorf("%w: RELEASE_LOCK returned %d", ErrNotHeld, res.Int64)
	}
	return nil
}

// MySQLHeld is the keepalive of a MySQL lock connection: it checks that the
// named lock is still held by this very connection.
func MySQLHeld(ctx context.Context, q Querier, name string) error {
	var held sql.NullBool
	if err := q.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?) = CONNECTION_ID()", name).Scan(&held); err != nil {
		return errs.Wrap(err, "keepalive")
	}
	if !held.Valid || !held.Bool {
		return fmt.Errorf("%w: IS_USED_LOCK no longer names this connection", ErrNotHeld)
	}
	return nil
}

// MySQLKeepSession makes sure that the server does not drop an idle lock
// connection (and its lock) between keepalives: it reads the connection's
// own wait_timeout and raises it to atLeast (never below a minute) when it
// is shorter. It returns the previous value in seconds, for
// MySQLRestoreSession, or 0 when the value was long enough and was left as
// it was. Both statements are sent without arguments (the value is an
// integer literal), one round trip each.
func MySQLKeepSession(ctx context.Context, q Querier, atLeast time.Duration) (prev int64, err error) {
	secs := max(int64(atLeast/time.Second), 60)
	if err := q.QueryRowContext(ctx, "SELECT @@session.wait_timeout").Scan(&prev); err != nil {
		return 0, errs.Wrap(err, "read wait_timeout")
	}
	if prev >= secs {
		return 0, nil
	}
	if _, err := q.ExecContext(ctx, "SET SESSION wait_timeout = "+strconv.FormatInt(secs, 10)); err != nil {
		return 0, errs.Wrap(err, "raise wait_timeout")
	}
	return prev, nil
}

// MySQLRestoreSession sets the connection's wait_timeout back to prev, the
// value MySQLKeepSession found (the application's own, from the DSN or a SET
// of its own, or the server's default), once a Session is done with the
// connection and before it goes back to the pool. prev 0 means that nothing
// was changed: it does nothing.
func MySQLRestoreSession(ctx context.Context, q Querier, prev int64) error {
	if prev <= 0 {
		return nil
	}
	if _, err := q.ExecContext(ctx, "SET SESSION wait_timeout = "+strconv.FormatInt(prev, 10)); err != nil {
		return errs.Wrap(err, "restore wait_timeout")
	}
	return nil
}
