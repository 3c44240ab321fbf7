package lockproto

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
)

// Dialect is the lock protocol family of a database.
type Dialect uint8

const (
	// Postgres covers PostgreSQL, directly or behind PgBouncer.
	Postgres Dialect = iota + 1
	// MySQL covers MySQL and MariaDB.
	MySQL
)

// String returns "postgres" or "mysql".
func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case MySQL:
		return "mysql"
	}
	return "unknown"
}

// DialectOf maps an ORM's dialect name to a Dialect. Names: "postgres",
// "pgx", "postgresql", "mysql" and "mariadb" (MariaDB uses the mysql name in
// both GORM and ent, but "mariadb" is accepted too). Anything else wraps
// ormlock.ErrUnsupportedDialect.
func DialectOf(name string) (Dialect, error) {
	switch name {
	case "postgres", "postgresql", "pgx":
		return Postgres, nil
	case "mysql", "mariadb":
		return MySQL, nil
	}
	return 0, fmt.Errorf("%w: %q (ormlock supports postgres and mysql/mariadb)", ormlock.ErrUnsupportedDialect, name)
}

// Querier is what the protocol needs of a connection or transaction:
// *sql.Conn, *sql.Tx and *sql.DB all satisfy it, and so do GORM's ConnPools.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// ---- PostgreSQL: transaction-level advisory locks ----

// PGTryXact tries pg_try_advisory_xact_lock on the transaction q. With
// iso, the same statement reads the transaction's isolation into it, and
// when that is a level whose snapshot the statement just took (REPEATABLE
// READ, SERIALIZABLE) PGTryXact returns errSnapshotTaken (a lock it took
// ends with the transaction, which the caller rolls back).
//
// With pid, the same statement also reads the backend's pid into it (the
// lock's holder, which a fenced token's issuance checks: see fence.go).
func PGTryXact(ctx context.Context, q Querier, k keys.PostgresKey, iso *string, pid *uint32) (bool, error) {
	var ok bool
	var err error
	dest := []any{&ok}
	cols := ""
	if iso != nil {
		dest, cols = append(dest, iso), ", current_setting('transaction_isolation')"
	}
	if pid != nil {
		dest, cols = append(dest, pid), cols+", pg_backend_pid()"
	}
	if k.IsPair {
		err = q.QueryRowContext(ctx, "SELECT pg_try_advisory_xact_lock($1::int4, $2::int4)"+cols, k.ClassID, k.ObjID).Scan(dest...)
	} else {
		err = q.QueryRowContext(ctx, "SELECT pg_try_advisory_xact_lock($1::int8)"+cols, k.Int64).Scan(dest...)
	}
	if err != nil {
		return false, errs.Wrap(err, "pg_try_advisory_xact_lock")
	}
	if snapshotTaken(iso) {
		return false, errSnapshotTaken
	}
	return ok, nil
}

// snapshotTaken reports whether iso, when read, is a level whose snapshot
// the statement that read it took.
func snapshotTaken(iso *string) bool {
	if iso == nil {
		return false
	}
	_, snap := snapshotLevel(*iso)
	return snap
}

// sqlStateLockNotAvailable is PostgreSQL's lock_not_available, raised when
// lock_timeout expires.
const sqlStateLockNotAvailable = "55P03"

// pgMaxLockTimeout is the largest lock_timeout PostgreSQL accepts, in
// milliseconds (INT_MAX, about 24.8 days); a longer wait is clamped to it.
const pgMaxLockTimeout = 1<<31 - 1

// PGWaitXact waits up to wait for pg_advisory_xact_lock on the transaction q,
// bounded by a server-side lock_timeout rather than by context cancellation
// (which would make the driver close the connection). lock_timeout is
// restored to its previous value once the lock is held. When the timeout
// expires it returns false and the transaction is aborted: the caller must
// roll it back (or roll back to its savepoint).
//
// With iso, the first statement (which sets lock_timeout) also reads the
// transaction's isolation into it, and when that is a level whose snapshot
// that statement just took (REPEATABLE READ, SERIALIZABLE) PGWaitXact
// returns errSnapshotTaken without waiting. With pid, the lock statement
// also reads the backend's pid into it, as PGTryXact's does.
func PGWaitXact(ctx context.Context, q Querier, k keys.PostgresKey, wait time.Duration, iso *string, pid *uint32) (bool, error) {
	ms := min(max(wait.Milliseconds(), 1), pgMaxLockTimeout)
	var prev string
	dest := []any{&prev, new(string)}
	isoCol := ""
	if iso != nil {
		dest, isoCol = append(dest, iso), ", current_setting('transaction_isolation')"
	}
	if err := q.QueryRowContext(ctx, "SELECT current_setting('lock_timeout'), set_config('lock_timeout', $1, true)"+isoCol,
		strconv.FormatInt(ms, 10)+"ms").Scan(dest...); err != nil {
		return false, errs.Wrap(err, "set lock_timeout")
	}
	if snapshotTaken(iso) {
		return false, errSnapshotTaken
	}
	var err error
	switch {
	case pid != nil && k.IsPair:
		err = q.QueryRowContext(ctx, "SELECT pg_backend_pid() FROM (SELECT pg_advisory_xact_lock($1::int4, $2::int4), set_config('lock_timeout', $3, true)) l", k.ClassID, k.ObjID, prev).Scan(pid)
	case pid != nil:
		err = q.QueryRowContext(ctx, "SELECT pg_backend_pid() FROM (SELECT pg_advisory_xact_lock($1::int8), set_config('lock_timeout', $2, true)) l", k.Int64, prev).Scan(pid)
	case k.IsPair:
		_, err = q.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1::int4, $2::int4), set_config('lock_timeout', $3, true)", k.ClassID, k.ObjID, prev)
	default:
		_, err = q.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1::int8), set_config('lock_timeout', $2, true)", k.Int64, prev)
	}
	if err != nil {
		if SQLState(err) == sqlStateLockNotAvailable {
			return false, nil
		}
		return false, errs.Wrap(err, "pg_advisory_xact_lock")
	}
	return true, nil
}

// PGIdleTimeout returns the session's idle_in_transaction_session_timeout
// (0 when disabled).
func PGIdleTimeout(ctx context.Context, q Querier) (time.Duration, error) {
	var ms int64
	if err := q.QueryRowContext(ctx, "SELECT setting::int8 FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout'").Scan(&ms); err != nil {
		return 0, errs.Wrap(err, "read idle_in_transaction_session_timeout")
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// PGPing is the keepalive of a PostgreSQL lock transaction. It takes no
// arguments, so the driver sends it with the simple protocol, which also
// closes the unnamed portal the lock query left behind: an idle READ
// COMMITTED transaction then holds no snapshot (backend_xmin is NULL).
func PGPing(ctx context.Context, q Querier) error {
	if _, err := q.ExecContext(ctx, "SELECT 1"); err != nil {
		return errs.Wrap(err, "keepalive")
	}
	return nil
}

// statementTimeout reports whether err is the server's statement timeout
// cutting a statement short: PostgreSQL's query_canceled (57014, raised by
// statement_timeout), MariaDB's max_statement_time (1969) or MySQL's
// max_execution_time (3024), or GET_LOCK's NULL, which MariaDB returns
// when max_statement_time interrupts it.
func statementTimeout(err error) bool {
	if SQLState(err) == "57014" || errors.Is(err, errGetLockNull) {
		return true
	}
	return isMySQLErrno(err, 1969, 3024)
}

// SQLState returns the SQLSTATE of a server error, or "".
func SQLState(err error) string {
	var s interface{ SQLState() string }
	if errors.As(err, &s) {
		return s.SQLState()
	}
	return ""
}

// ---- MySQL / MariaDB: named locks ----

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
	// back to completionType after the release (ReleaseNamed)
	restoreCT bool
}

// mysqlGetLock is MySQLGetLock; with sess, the same statement reads the
// session's @@autocommit (a fenced token's INSERT is committed explicitly
// when it is 0: see fence.go) and @@completion_type (a Transaction sets it
// to 0 for its transaction when it is not: see beginMySQL) into it.
func mysqlGetLock(ctx context.Context, q Querier, name string, wait time.Duration, sess *mysqlLockConnVars) (bool, error) {
	var res sql.NullInt64
	var err error
	dest, col := []any{&res}, ""
	if sess != nil {
		dest, col = append(dest, &sess.autocommit, &sess.completionType), ", @@autocommit, @@completion_type"
	}
	if wait <= 0 {
		err = q.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)"+col, name).Scan(dest...)
	} else {
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

// ---- connections ----

// Destroy closes a pinned connection so that it is never handed back to the
// pool: the driver connection is marked bad and closed, and the server frees
// whatever the session held. It is used when a release failed or could not be
// confirmed.
func Destroy(c *sql.Conn) {
	_ = c.Raw(func(any) error { return driver.ErrBadConn })
	_ = c.Close()
}
