package lockproto

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
)

// The PostgreSQL statements of the transaction-level advisory lock, sent
// with arguments (the two-message path, and other callers).

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
