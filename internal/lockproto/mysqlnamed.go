package lockproto

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ormlock/ormlock/internal/errs"
)

// The MySQL/MariaDB statements of the named lock (GET_LOCK, RELEASE_LOCK,
// IS_USED_LOCK) and of the lock connection's session settings.

// errGetLockNull is GET_LOCK's NULL: the statement was interrupted (KILL
// QUERY, max_statement_time) or failed; the lock was not taken.
var errGetLockNull = errors.New("ormlock: GET_LOCK returned NULL (interrupted: KILL QUERY or max_statement_time)")

// MySQLGetLock runs GET_LOCK(name, timeout) on the pinned connection q, as
// a text statement without arguments (one round trip; see writeMySQLName). A
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
// The statement is text without arguments (writeMySQLName): one COM_QUERY.
func mysqlGetLockProbe(ctx context.Context, q Querier, name string, wait time.Duration, sess *mysqlLockConnVars, probe *slotProbe) (bool, error) {
	var res sql.NullInt64
	dest := []any{&res}
	var b strings.Builder
	size := mysqlStmtSize(len("SELECT GET_LOCK(, )")+24+len(", @@autocommit, @@completion_type"), name)
	if probe != nil {
		size += mysqlStmtSize(len(", IS_USED_LOCK() IS NOT NULL"), probe.it.mysql)
	}
	b.Grow(size)
	b.WriteString("SELECT GET_LOCK(")
	writeMySQLName(&b, name)
	b.WriteString(", ")
	b.WriteString(mysqlTimeout(wait))
	b.WriteByte(')')
	if sess != nil {
		b.WriteString(", @@autocommit, @@completion_type")
		dest = append(dest, &sess.autocommit, &sess.completionType)
	}
	if probe != nil {
		b.WriteString(", IS_USED_LOCK(")
		writeMySQLName(&b, probe.it.mysql)
		b.WriteString(") IS NOT NULL")
		dest = append(dest, &probe.seen)
	}
	if err := q.QueryRowContext(ctx, b.String()).Scan(dest...); err != nil {
		return false, errs.Wrap(err, "GET_LOCK")
	}
	if !res.Valid {
		return false, errGetLockNull
	}
	return res.Int64 == 1, nil
}

// MySQL/MariaDB's lock functions are sent as text without arguments
// (go-sql-driver/mysql then sends one COM_QUERY, where a statement with a
// ? costs a COM_STMT_PREPARE and a COM_STMT_EXECUTE, two round trips,
// unless the DSN has interpolateParams). The name is never quoted text: it
// is written as the expression CAST(X'<its bytes in hex>' AS CHAR).
//
//   - A hexadecimal literal is a binary string whatever the session's
//     sql_mode (NO_BACKSLASH_ESCAPES and ANSI_QUOTES change quoted strings
//     only) and whatever the client character set (the statement is ASCII,
//     which every client character set the servers accept reads alike).
//   - CAST(binary AS CHAR) is a string of the connection's character set
//     (character_set_connection) with the same bytes: a copy, no
//     conversion. A bound parameter (a COM_STMT_EXECUTE's, as earlier
//     releases sent the name) arrives as a string of character_set_client
//     converted to character_set_connection, which is a copy too when the
//     two are one character set (they are after the handshake, SET NAMES,
//     or the DSN's charset: utf8mb4, latin1, binary alike). So both reach
//     GET_LOCK as the same bytes in the same character set: the same lock,
//     on MariaDB (which compares names byte for byte) and on MySQL 5.7 and
//     later (which converts the name from its character set to utf8 and
//     lower-cases it). Tested both ways by TestMySQLNameLiteralIdentity.
//   - Timeouts are numeric literals (mysqlTimeout), never text from a
//     caller: the seconds a bound parameter sent, fractions kept (MariaDB
//     reads the timeout as a double, so a whole-second literal would turn a
//     20 ms wait into 0 or 1 s).

// writeMySQLName writes name as the expression CAST(X'…' AS CHAR) (above).
func writeMySQLName(b *strings.Builder, name string) {
	const digits = "0123456789abcdef"
	b.WriteString("CAST(X'")
	for i := 0; i < len(name); i++ {
		b.WriteByte(digits[name[i]>>4])
		b.WriteByte(digits[name[i]&0x0f])
	}
	b.WriteString("' AS CHAR)")
}

// mysqlStmtSize is the size of a statement of fixed bytes of its own
// text and the name literal of name (writeMySQLName).
func mysqlStmtSize(fixed int, name string) int { return fixed + len("CAST(X'' AS CHAR)") + 2*len(name) }

// mysqlTimeout is GET_LOCK's timeout for a wait: a numeric literal of
// seconds, the float64 a bound parameter sent (wait.Seconds(), shortest
// exact form, never an exponent), or 0 for a try.
func mysqlTimeout(wait time.Duration) string {
	if wait <= 0 {
		return "0"
	}
	return strconv.FormatFloat(wait.Seconds(), 'f', -1, 64)
}

// mysqlNameStmt is the statement "SELECT <fn>(<name literal>)<tail>".
func mysqlNameStmt(fn, name, tail string) string {
	var b strings.Builder
	b.Grow(mysqlStmtSize(len("SELECT ()")+len(fn)+len(tail), name))
	b.WriteString("SELECT ")
	b.WriteString(fn)
	b.WriteByte('(')
	writeMySQLName(&b, name)
	b.WriteByte(')')
	b.WriteString(tail)
	return b.String()
}

// ErrNotHeld is returned by MySQLReleaseLock when the server says the lock
// was not held by this connection (RELEASE_LOCK returned 0 or NULL).
var ErrNotHeld = errors.New("ormlock: lock was not held by this connection")

// MySQLReleaseLock runs RELEASE_LOCK(name) on the pinned connection q. Any
// result but 1 is an error: 0 (held by another connection) and NULL (no such
// lock) wrap ErrNotHeld.
func MySQLReleaseLock(ctx context.Context, q Querier, name string) error {
	var res sql.NullInt64
	if err := q.QueryRowContext(ctx, mysqlNameStmt("RELEASE_LOCK", name, "")).Scan(&res); err != nil {
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
	if err := q.QueryRowContext(ctx, mysqlNameStmt("IS_USED_LOCK", name, " = CONNECTION_ID()")).Scan(&held); err != nil {
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
