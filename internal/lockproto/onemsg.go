package lockproto

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/errs"
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

// errNotOurStatement says that the prepared lock statement's answer did not
// carry the connection's mark, and the library's statement could not be
// put in its place: the lock was not taken.
var errNotOurStatement = errors.New("the prepared lock statement is not the library's")

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
// level; then, with probe, the backend's pid (see pgSession).
func pgLockMessage(begin string, k keys.PostgresKey, wait time.Duration, long, probe bool) string {
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

// isPgx reports whether conn is a pgx connection, on which the lock can
// travel with BEGIN (lockOneMessage).
func isPgx(conn *sql.Conn) bool {
	return withPgConn(conn, func(*pgconn.PgConn) error { return nil }) == nil
}

// ---- the try-once lock as a prepared statement ----
//
// Parsing and planning the lock's SELECT is most of what the server spends
// on a locked transaction beyond an unlocked one (on a loopback server, as
// much as the client's whole call). So on a connection that reaches its
// backend directly, a Transaction's try-once lock is a statement prepared
// once per connection, by SQL (PREPARE, in the message of its first use),
// and run by EXECUTE in the one message with BEGIN; the message is still
// one simple-protocol query, and the server parses only the EXECUTE:
//
//	BEGIN; EXECUTE ormlock_pg_try_advisory_xact_lock_int8(-2533923874772390729)
//
// The statement is named after the function it runs, so that the server's
// log says what the message does. A connection is direct when the pid of
// its backend (pg_backend_pid(), read with the first lock taken on the
// connection) is the pid the connection announced when it started: a pooler
// in between (PgBouncer in transaction mode hands each transaction to any
// of its server connections, where a prepared statement may not exist)
// announces a pid of its own, so behind one the lock is sent as text every
// time. A prepared statement that the application dropped (DISCARD ALL,
// DEALLOCATE) is prepared again in the same call: ROLLBACK, then the
// message with PREPARE. Prepared statements outlive ROLLBACK; they are the
// connection's and end with it. The wait, Session and the split protocol's
// lock transaction keep the text message.

// pgTryStmt names the prepared try-once lock statements, for int8 keys and
// for pairs of int4; their first column is the lock's result, their second
// the transaction's isolation (read when BEGIN named no level), their third
// the connection's mark (pgSession.mark), a literal of the statement's
// body: the library trusts an EXECUTE's answer only when it carries the
// mark, so that a statement of that name it did not prepare (the
// application's own) can never stand in for the lock. A statement that
// answers without the mark, or fails as the library's never would (other
// parameter types), is dropped and the library's prepared in its place,
// within the call.
var pgTryStmt = [2]struct{ name, prepare string }{
	{"ormlock_pg_try_advisory_xact_lock_int8",
		"PREPARE ormlock_pg_try_advisory_xact_lock_int8(int8) AS SELECT pg_try_advisory_xact_lock($1), current_setting('transaction_isolation'), "},
	{"ormlock_pg_try_advisory_xact_lock_int4",
		"PREPARE ormlock_pg_try_advisory_xact_lock_int4(int4, int4) AS SELECT pg_try_advisory_xact_lock($1, $2), current_setting('transaction_isolation'), "},
}

// pgSessionKey is the key of a connection's pgSession in pgconn's
// CustomData.
const pgSessionKey = "ormlock.session"

// pgSession is what the protocol knows of one pgx connection, kept with it
// (pgconn's CustomData).
type pgSession struct {
	known    bool    // direct was read
	direct   bool    // the connection reaches its backend without a pooler
	prepared [2]bool // pgTryStmt[i] is prepared on the backend
	mark     int64   // random, written into the statements this connection prepares
}

// pgSessionOf returns pc's pgSession, created on first use; nil when pgconn
// keeps no custom data.
func pgSessionOf(pc *pgconn.PgConn) *pgSession {
	m := pc.CustomData()
	if m == nil {
		return nil
	}
	if s, ok := m[pgSessionKey].(*pgSession); ok {
		return s
	}
	s := &pgSession{mark: rand.Int64N(1<<62) + 1}
	m[pgSessionKey] = s
	return s
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

// SQLSTATEs of the prepared statement's life: gone (26000,
// invalid_sql_statement_name) and there already (42P05,
// duplicate_prepared_statement).
const (
	sqlStateNoStatement  = "26000"
	sqlStateDupStatement = "42P05"
)

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

// lockLayout says which columns follow the lock's result in the last row of
// a lock message, in this order.
type lockLayout struct {
	wait bool // the lock is the bounded wait (its result is IS NOT NULL), followed by lock_timeout's restore
	long bool // idle_in_transaction_session_timeout, in milliseconds
	iso  bool // transaction_isolation
	pid  bool // pg_backend_pid()
	mark bool // the prepared statement's mark (pgSession.mark)
}

// lockReply is what a lock message answered.
type lockReply struct {
	ok    bool
	idle  time.Duration
	level sql.IsolationLevel // transaction_isolation when it takes its snapshot once (snapshotLevel), else LevelDefault
	pid   uint32
	mark  int64
}

// readLockReply reads the answer to a lock message to its end, without
// keeping it: the lock's row is the first row of the last result that has
// rows (BEGIN and PREPARE have none; the wait's set_config has one, before
// the lock's).
func readLockReply(mrr *pgconn.MultiResultReader, l lockLayout) (lockReply, error) {
	var (
		rep     lockReply
		rowErr  error
		results int
		rows    int
	)
	for mrr.NextResult() {
		results++
		rr := mrr.ResultReader()
		n := 0
		for rr.NextRow() {
			n++
			if n == 1 {
				rep, rowErr = parseLockRow(rr.Values(), l)
			}
		}
		if _, err := rr.Close(); err != nil {
			_ = mrr.Close()
			return lockReply{}, err
		}
		if n > 0 {
			rows = n
		}
	}
	if err := mrr.Close(); err != nil {
		return lockReply{}, err
	}
	switch {
	case results == 0:
		return lockReply{}, errors.New("no result")
	case rows != 1:
		return lockReply{}, fmt.Errorf("unexpected result of the lock statement: %d rows", rows)
	}
	return rep, rowErr
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

	// snapDefault is the server's transaction_isolation when BEGIN named
	// no level and that level takes its snapshot once (snapshotLevel);
	// LevelDefault otherwise.
	snapDefault sql.IsolationLevel

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
		mrr := pc.Exec(t.ctx, stmt)
		results, rolledBack := 0, false
		for mrr.NextResult() {
			tag, _ := mrr.ResultReader().Close()
			results++
			rolledBack = tag.String() == "ROLLBACK"
		}
		err := mrr.Close()
		idle = err == nil && pc.TxStatus() == 'I'
		if err != nil {
			return err
		}
		if stmt == "COMMIT" && results == 1 && rolledBack {
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
