package lockproto

import (
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ormlock/ormlock/internal/keys"
)

// The PostgreSQL lock message: the query strings that begin a transaction
// and take the lock in one message (pgLockMessage, pgTryMessage), and the
// parser of their reply (readLockReply, parseLockRow). Pure functions but
// readLockReply, which reads the driver's reply (PgReply).

// pgBegin returns the BEGIN statement for opts, as pgx's database/sql driver
// writes it, and false for options it does not handle here.
func pgBegin(opts *sql.TxOptions) (string, bool) {
	if opts == nil {
		return "BEGIN", true
	}
	var b strings.Builder
	b.WriteString("BEGIN")
	switch opts.Isolation {
	case sql.LevelDefault:
	case sql.LevelReadUncommitted:
		b.WriteString(" ISOLATION LEVEL READ UNCOMMITTED")
	case sql.LevelReadCommitted:
		b.WriteString(" ISOLATION LEVEL READ COMMITTED")
	default:
		return "", false
	}
	if opts.ReadOnly {
		b.WriteString(" READ ONLY")
	}
	return b.String(), true
}

// pgKeyArgs writes k as the arguments of an advisory lock function, as
// integer literals.
func pgKeyArgs(b *strings.Builder, k keys.PostgresKey) {
	var num [24]byte
	if k.IsPair {
		b.WriteString("(")
		b.Write(strconv.AppendInt(num[:0], int64(k.ClassID), 10))
		b.WriteString(")::int4, (")
		b.Write(strconv.AppendInt(num[:0], int64(k.ObjID), 10))
		b.WriteString(")::int4")
		return
	}
	b.WriteString("(")
	b.Write(strconv.AppendInt(num[:0], k.Int64, 10))
	b.WriteString(")::int8")
}

// pgLockMessage is the query string that begins the transaction and takes
// k: begin; for a Session (long), turning transaction_timeout off (see
// PGKeepTransaction); then the lock. With wait > 0 it is the bounded wait:
// lock_timeout is set for the lock statement and set back, in that same
// statement, to the value it had (kept in a setting of the transaction,
// ormlock.lock_timeout). The last statement's first column is the lock's
// result (true, or for the wait the empty result of a granted lock); its
// second, for a Session, the session's idle_in_transaction_session_timeout
// in milliseconds; then, without a level in begin, the server's default
// level; then, with probe, the backend's pid (see pgConnState).
func pgLockMessage(begin string, k keys.PostgresKey, shared bool, wait time.Duration, long, probe bool) string {
	var b strings.Builder
	b.Grow(256)
	b.WriteString(begin)
	if long {
		b.WriteString("; ")
		b.WriteString(pgKeepTransaction)
	}
	if wait > 0 {
		ms := min(max(wait.Milliseconds(), 1), pgMaxLockTimeout)
		b.WriteString("; SELECT set_config('ormlock.lock_timeout', current_setting('lock_timeout'), true), set_config('lock_timeout', '")
		b.WriteString(strconv.FormatInt(ms, 10))
		b.WriteString("ms', true); SELECT pg_advisory_xact_lock")
		if shared {
			b.WriteString("_shared")
		}
		b.WriteString("(")
		pgKeyArgs(&b, k)
		b.WriteString(") IS NOT NULL, set_config('lock_timeout', current_setting('ormlock.lock_timeout'), true)")
	} else {
		b.WriteString("; SELECT pg_try_advisory_xact_lock")
		if shared {
			b.WriteString("_shared")
		}
		b.WriteString("(")
		pgKeyArgs(&b, k)
		b.WriteString(")")
	}
	if long {
		b.WriteString(", (SELECT setting::int8 FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout')")
	}
	if !strings.Contains(begin, "ISOLATION") {
		// the server's default level applies: report it (see isoDefault)
		b.WriteString(", current_setting('transaction_isolation')")
	}
	if probe {
		b.WriteString(", pg_backend_pid()")
	}
	return b.String()
}

// snapshotLevel maps PostgreSQL's transaction_isolation setting to the level
// whose snapshot is taken once, at the transaction's first statement
// (REPEATABLE READ or SERIALIZABLE), and reports whether it is one.
func snapshotLevel(setting string) (sql.IsolationLevel, bool) {
	switch setting {
	case "repeatable read":
		return sql.LevelRepeatableRead, true
	case "serializable":
		return sql.LevelSerializable, true
	}
	return sql.LevelDefault, false
}

// pgTryMessage is the one message of the prepared try-once lock on a direct
// connection: BEGIN, PREPARE (with the connection's mark) when the
// statement is not prepared yet, and EXECUTE.
func pgTryMessage(begin string, k keys.PostgresKey, prepare bool, mark int64) string {
	var num [24]byte
	i := pgTryIndex(k)
	var b strings.Builder
	b.Grow(256)
	b.WriteString(begin)
	if prepare {
		b.WriteString("; ")
		b.WriteString(pgTryStmt[i].prepare)
		b.Write(strconv.AppendInt(num[:0], mark, 10))
		b.WriteString("::int8")
	}
	b.WriteString("; EXECUTE ")
	b.WriteString(pgTryStmt[i].name)
	b.WriteString("(")
	if k.IsPair {
		b.Write(strconv.AppendInt(num[:0], int64(k.ClassID), 10))
		b.WriteString(", ")
		b.Write(strconv.AppendInt(num[:0], int64(k.ObjID), 10))
	} else {
		b.Write(strconv.AppendInt(num[:0], k.Int64, 10))
	}
	b.WriteString(")")
	return b.String()
}

func pgTryIndex(k keys.PostgresKey) int {
	if k.IsPair {
		return 1
	}
	return 0
}

// lockLayout says which columns follow the lock's result in the last row of
// a lock message, in this order.
type lockLayout struct {
	wait bool // the lock is the bounded wait (its result is IS NOT NULL), followed by lock_timeout's restore
	long bool // idle_in_transaction_session_timeout, in milliseconds
	iso  bool // transaction_isolation
	pid  bool // pg_backend_pid()
	mark bool // the prepared statement's mark (pgConnState.mark)
	slot bool // the lock's result is a semaphore's slot number (pgShapeStmt), not a boolean
	then bool // a statement without rows follows the lock's (Op.Then), whose rows affected are read
}

// lockReply is what a lock message answered.
type lockReply struct {
	ok    bool
	idle  time.Duration
	level sql.IsolationLevel // transaction_isolation when it takes its snapshot once (snapshotLevel), else LevelDefault
	pid   uint32
	mark  int64
	slot  int   // a semaphore's slot taken (1 to n), 0 when none, -1 when none and slot n+1 is held
	then  int64 // the rows the statement after the lock's affected (lockLayout.then)
	// thenErr is the error of the statement after the lock's, which was
	// taken (lockLayout.then): the transaction failed, with the lock
	thenErr error
}

// readLockReply reads the answer to a lock message to its end, without
// keeping it: the lock's row is the first row of the last result that has
// rows (BEGIN and PREPARE have none; the wait's set_config has one, before
// the lock's).
func readLockReply(mrr PgReply, l lockLayout) (lockReply, error) {
	var (
		rep     lockReply
		rowErr  error
		results int
		rows    int
		tag     string
	)
	for mrr.NextResult() {
		results++
		n := 0
		for mrr.NextRow() {
			n++
			if n == 1 {
				rep, rowErr = parseLockRow(mrr.Values(), l)
			}
		}
		var err error
		if tag, err = mrr.CloseResult(); err != nil {
			_ = mrr.Close()
			return thenFailed(rep, rowErr, l, err)
		}
		if n > 0 {
			rows = n
		}
	}
	if err := mrr.Close(); err != nil {
		return thenFailed(rep, rowErr, l, err)
	}
	switch {
	case results == 0:
		return lockReply{}, errors.New("no result")
	case rows != 1:
		return lockReply{}, fmt.Errorf("unexpected result of the lock statement: %d rows", rows)
	}
	if l.then {
		rep.then = tagRows(tag)
	}
	return rep, rowErr
}

// thenFailed is readLockReply's answer to err, which ended the reply: with
// a statement after the lock's (lockLayout.then) whose lock was taken (its
// row read, true), that statement's error, the transaction failed with the
// lock (lockReply.thenErr); otherwise err.
func thenFailed(rep lockReply, rowErr error, l lockLayout, err error) (lockReply, error) {
	if l.then && rep.ok && rowErr == nil {
		rep.thenErr = err
		return rep, nil
	}
	return lockReply{}, err
}

// parseLockRow reads the lock's row (see lockLayout).
func parseLockRow(row [][]byte, l lockLayout) (lockReply, error) {
	want := 1
	for _, b := range []bool{l.wait, l.long, l.iso, l.pid, l.mark} {
		if b {
			want++
		}
	}
	if len(row) < want {
		return lockReply{}, fmt.Errorf("unexpected result of the lock statement: %d columns", len(row))
	}
	var rep lockReply
	rep.ok = string(row[0]) == "t"
	if l.slot {
		n, err := strconv.Atoi(string(row[0]))
		if err != nil {
			return lockReply{}, fmt.Errorf("unexpected result of the semaphore's statement: %q", row[0])
		}
		rep.ok, rep.slot = n > 0, n
	}
	if l.wait && !rep.ok {
		return lockReply{}, fmt.Errorf("unexpected result of pg_advisory_xact_lock: %q", row[0])
	}
	c := 1
	if l.wait {
		c++ // the restored lock_timeout
	}
	if l.long {
		if row[c] != nil {
			ms, err := strconv.ParseInt(string(row[c]), 10, 64)
			if err != nil {
				return lockReply{}, fmt.Errorf("read idle_in_transaction_session_timeout: %w", err)
			}
			rep.idle = time.Duration(ms) * time.Millisecond
		}
		c++
	}
	if l.iso {
		rep.level, _ = snapshotLevel(string(row[c]))
		c++
	}
	if l.pid {
		pid, err := strconv.ParseUint(string(row[c]), 10, 32)
		if err != nil {
			return lockReply{}, fmt.Errorf("read pg_backend_pid(): %w", err)
		}
		rep.pid = uint32(pid)
		c++
	}
	if l.mark {
		mark, err := strconv.ParseInt(string(row[c]), 10, 64)
		if err != nil {
			return lockReply{}, fmt.Errorf("read the prepared statement's mark: %w", err)
		}
		rep.mark = mark
	}
	return rep, nil
}
