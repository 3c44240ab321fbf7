package lockproto

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/keys"
)

// ---- PostgreSQL: BEGIN and the lock in one message ----
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
	if k.IsPair {
		b.WriteString("(")
		b.WriteString(strconv.FormatInt(int64(k.ClassID), 10))
		b.WriteString(")::int4, (")
		b.WriteString(strconv.FormatInt(int64(k.ObjID), 10))
		b.WriteString(")::int4")
		return
	}
	b.WriteString("(")
	b.WriteString(strconv.FormatInt(k.Int64, 10))
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
// in milliseconds.
func pgLockMessage(begin string, k keys.PostgresKey, wait time.Duration, long bool) string {
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
		b.WriteString("ms', true); SELECT pg_advisory_xact_lock(")
		pgKeyArgs(&b, k)
		b.WriteString(") IS NOT NULL, set_config('lock_timeout', current_setting('ormlock.lock_timeout'), true)")
	} else {
		b.WriteString("; SELECT pg_try_advisory_xact_lock(")
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

// isPgx reports whether conn is a pgx connection, on which the lock can
// travel with BEGIN (lockOneMessage).
func isPgx(conn *sql.Conn) bool {
	return withPgConn(conn, func(*pgconn.PgConn) error { return nil }) == nil
}

// lockOneMessage begins a transaction with begin on the pinned pgx
// connection conn (see isPgx) and takes o's lock in the same message (see
// pgLockMessage). On success it returns the transaction, which owns conn
// from then on, and for a Session (long) the session's
// idle_in_transaction_session_timeout; on failure conn has been given back
// (its transaction ended: ROLLBACK confirmed by the server) or destroyed,
// and the error is classified as AcquireXact's.
func (o *Op) lockOneMessage(ctx context.Context, db *sql.DB, conn *sql.Conn, begin string, long bool) (*ConnTx, time.Duration, error) {
	o.start = time.Now()
	o.Emit(ctx, ormlock.EventAttempt, nil)
	wait, bounded, err := o.budget(ctx)
	if err != nil {
		_ = conn.Close() // nothing was sent
		return nil, 0, err
	}
	msg := pgLockMessage(begin, o.pg, wait, long)
	mctx, done := ctx, func() {}
	if wait > 0 {
		mctx, done = waitCtx(ctx)
	}
	var (
		res    []*pgconn.Result
		status byte
	)
	err = withPgConn(conn, func(pc *pgconn.PgConn) error {
		var err error
		res, err = pc.Exec(mctx, msg).ReadAll()
		status = pc.TxStatus()
		if err == nil && pc.IsClosed() {
			err = errors.New("connection closed")
		}
		return err
	})
	done()
	ok, idle, iso := false, time.Duration(0), ""
	if err == nil {
		ok, idle, iso, err = pgLockResult(res, wait > 0, long, !strings.Contains(begin, "ISOLATION"))
	} else if wait > 0 && SQLState(err) == sqlStateLockNotAvailable {
		err = nil // lock_timeout expired: held elsewhere
	}
	if err == nil && ok && status != 'T' {
		err = fmt.Errorf("transaction status %q after the lock", status)
	}
	if err != nil {
		err = fmt.Errorf("ormlock: BEGIN and pg_advisory_xact_lock: %w", err)
	}
	txCtx, txCancel := txContext(ctx)
	tx := &ConnTx{conn: conn, db: db, ctx: txCtx, cancel: txCancel, isoDefault: iso}
	if err == nil && ok {
		return tx, idle, o.settle(ctx, true, bounded, nil)
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

// pgLockResult reads the last result of a lock message: whether the lock is
// held and, for a Session, the idle timeout.
func pgLockResult(res []*pgconn.Result, wait, long, iso bool) (bool, time.Duration, string, error) {
	if len(res) == 0 {
		return false, 0, "", errors.New("no result")
	}
	last := res[len(res)-1]
	if last.Err != nil {
		return false, 0, "", last.Err
	}
	if len(last.Rows) != 1 || len(last.Rows[0]) < 1 || (long && len(last.Rows[0]) < 2) || (iso && len(last.Rows[0]) < 2) {
		return false, 0, "", fmt.Errorf("unexpected result of the lock statement: %d rows", len(last.Rows))
	}
	row := last.Rows[0]
	ok := string(row[0]) == "t"
	if wait && !ok {
		return false, 0, "", fmt.Errorf("unexpected result of pg_advisory_xact_lock: %q", row[0])
	}
	var idle time.Duration
	if long && row[1] != nil {
		ms, err := strconv.ParseInt(string(row[1]), 10, 64)
		if err != nil {
			return false, 0, "", fmt.Errorf("read idle_in_transaction_session_timeout: %w", err)
		}
		idle = time.Duration(ms) * time.Millisecond
	}
	var level string
	if iso {
		level = string(row[len(row)-1])
	}
	return ok, idle, level, nil
}

// ConnTx is a PostgreSQL transaction begun on a pinned connection by a
// message of the protocol's own (BEGIN and the lock together), which
// database/sql does not know about. Statements run on the connection;
// Commit and Rollback send COMMIT or ROLLBACK, bounded by the transaction's
// own context, then give the connection back to the pool only when the
// server reports it idle outside any transaction, and destroy it otherwise.
// After Commit or Rollback, Exec, Query and Prepare return sql.ErrTxDone and
// QueryRow's row fails with sql.ErrConnDone, as on a *sql.Tx that ended.
//
// It is what GORM sees as the transaction's ConnPool (a gorm.TxCommitter,
// so GORM and dbresolver treat it as a transaction: nested calls use
// savepoints) and what ent's dialect.Tx runs statements on.
type ConnTx struct {
	conn   *sql.Conn
	db     *sql.DB
	ctx    context.Context // the transaction's own context: bounds COMMIT and ROLLBACK
	cancel context.CancelFunc

	// isoDefault is the server's transaction_isolation when BEGIN named no
	// level ("" when it did).
	isoDefault string

	mu   sync.Mutex
	done bool
}

func (t *ConnTx) markDone() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	was := t.done
	t.done = true
	return was
}

func (t *ConnTx) ended() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.done
}

// usable is what a *sql.Tx checks before a statement: the transaction
// has not ended and ctx has not. A statement on an ended context must not
// reach pgx, which answers it with driver.ErrBadConn (nothing was sent),
// upon which database/sql closes the connection under the open transaction:
// its lock would then be freed only when the server notices.
func (t *ConnTx) usable(ctx context.Context) error {
	if t.ended() {
		return sql.ErrTxDone
	}
	return ctx.Err()
}

// ExecContext runs a statement in the transaction.
func (t *ConnTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if err := t.usable(ctx); err != nil {
		return nil, err
	}
	return t.conn.ExecContext(ctx, query, args...)
}

// QueryContext runs a query in the transaction.
func (t *ConnTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if err := t.usable(ctx); err != nil {
		return nil, err
	}
	return t.conn.QueryContext(ctx, query, args...)
}

// QueryRowContext runs a query that returns at most one row in the
// transaction.
func (t *ConnTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if ctx.Err() != nil {
		// the pool checks ctx before it takes a connection: a row that
		// carries ctx's error, without touching any connection
		return t.db.QueryRowContext(ctx, query, args...)
	}
	return t.conn.QueryRowContext(ctx, query, args...)
}

// PrepareContext prepares a statement on the transaction's connection; it
// is valid until the transaction ends.
func (t *ConnTx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	if err := t.usable(ctx); err != nil {
		return nil, err
	}
	return t.conn.PrepareContext(ctx, query)
}

// GetDBConn returns the pool the connection came from (GORM's DB()).
func (t *ConnTx) GetDBConn() (*sql.DB, error) { return t.db, nil }

// Commit sends COMMIT. A transaction the server had aborted answers COMMIT
// with ROLLBACK: that is pgx's ErrTxCommitRollback, as from a *sql.Tx.
func (t *ConnTx) Commit() error { return t.end("COMMIT") }

// Rollback sends ROLLBACK.
func (t *ConnTx) Rollback() error { return t.end("ROLLBACK") }

func (t *ConnTx) end(stmt string) error {
	if t.markDone() {
		return sql.ErrTxDone
	}
	idle := false
	err := withPgConn(t.conn, func(pc *pgconn.PgConn) error {
		res, err := pc.Exec(t.ctx, stmt).ReadAll()
		idle = err == nil && pc.TxStatus() == 'I'
		if err != nil {
			return err
		}
		if stmt == "COMMIT" && len(res) == 1 && res[0].CommandTag.String() == "ROLLBACK" {
			return pgx.ErrTxCommitRollback
		}
		return nil
	})
	if idle {
		_ = t.conn.Close()
	} else {
		Destroy(t.conn)
	}
	t.cancel()
	return err
}
