package lockproto

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"time"

	"github.com/ormlock/ormlock/internal/errs"
)

// PostgreSQL: a statement after the lock in the message that begins the
// transaction (Op.SetThen), and one before COMMIT in the message that ends it: RunOnce's
// ledger claim and its mark done (internal/ledger), so that a transactional
// RunOnce at the default isolation costs the round trips of the plain
// transaction it guards (2):
//
//	BEGIN; SELECT CASE WHEN pg_try_advisory_xact_lock((k)::int8) THEN true
//	  ELSE current_setting('ormlock.lock_not_acquired')::bool END, current_setting('transaction_isolation');
//	INSERT INTO ledger … ON CONFLICT … DO UPDATE … WHERE r.status <> 'done'
//	… fn …
//	WITH f AS (UPDATE ledger SET status = 'done' … RETURNING 1) SELECT CASE WHEN count(*) = 1
//	  THEN true ELSE current_setting('ormlock.claim_lost')::bool END FROM f; COMMIT
//
// The claim is a statement of its own after the lock's, so at READ
// COMMITTED its snapshot is taken once the lock is granted and sees the
// previous holder's commit. A refused lock must not be followed by the
// claim: the try-once lock statement then raises (reading a setting that
// does not exist, SQLSTATE 42704, which names it: lockRefused), and the
// server skips the rest of a simple-protocol message after an error; the
// wait raises lock_not_available (55P03) when lock_timeout expires. Either
// is "not acquired", not an error; the ROLLBACK that follows is the second
// round trip of a loser, as for one key. (The server logs each refusal as an
// ERROR line with its statement, as it logs an expired lock_timeout.) The
// try-once lock is then sent as text, not as the prepared statement
// (prepared.go), whose answer is a boolean.
//
// Where the one message does not apply (a driver other than pgx, GORM's
// PrepareStmt, a savepoint of the caller's transaction, REPEATABLE READ and
// SERIALIZABLE, which take the split protocol) the statement is not sent
// with the lock: Op.ThenRows says so, and the caller runs its own.

// The settings whose reading raises: the try-once lock refused, and the
// statement before COMMIT refusing the commit.
const (
	pgNotAcquiredSetting = "ormlock.lock_not_acquired"
	pgClaimLostSetting   = "ormlock.claim_lost"
)

// thenStmt is Op's statement after the lock (SetThen), and what became of
// it.
type thenStmt struct {
	stmt   string
	ran    bool   // it ran in the message that began fn's transaction, which goes on
	rows   int64  // the rows it affected (its command tag's count)
	err    error  // its error, after the lock was taken (the transaction failed; the caller reports it)
	before string // sent before COMMIT in its message (CommitWith)
	// wtx is the wrapped connector's transaction whose BEGIN carried the
	// lock and the statement (sqlbegin.go): CommitWith puts before in its
	// COMMIT's message too
	wtx *wrappedTx
}

// SetThen makes stmt, literals only, travel after the lock statement in
// the message that begins fn's transaction, where that message applies
// (see above); ThenRows says whether it did.
func (o *Op) SetThen(stmt string) { o.then = &thenStmt{stmt: stmt} }

// ThenRows reports whether the statement of SetThen ran in the message
// that began fn's transaction (the lock was taken and the transaction goes
// on) and, if so, how many rows it affected, or its error: the lock was
// taken, and the transaction, which holds it, has failed (the caller
// reports the error and rolls it back, as after a statement of its own
// that failed). When it did not run, the caller runs its own statement in
// the transaction.
func (o *Op) ThenRows() (int64, bool, error) {
	if o.then == nil {
		return 0, false, nil
	}
	return o.then.rows, o.then.ran, o.then.err
}

// sendsThen reports whether o's lock message for use carries the
// statement of SetThen.
func (o *Op) sendsThen(use lockTxFor) bool {
	return o.then != nil && use == forFn && o.target.Simple() && !o.Cfg.Fencing
}

// pgThenMessage is the lock message of o that carries its statement of
// SetThen (see above):
// the try-once lock raises when refused; the wait is pgLockMessage's.
func pgThenMessage(o *Op, begin string, wait time.Duration, iso bool) (string, lockLayout) {
	l := lockLayout{wait: wait > 0, iso: iso, then: true}
	if wait > 0 {
		return pgLockMessage(begin, o.target.pg, false, wait, false, false) + "; " + o.then.stmt, l
	}
	var b strings.Builder
	b.Grow(160 + len(o.then.stmt))
	b.WriteString(begin)
	b.WriteString("; SELECT CASE WHEN pg_try_advisory_xact_lock(")
	pgKeyArgs(&b, o.target.pg)
	b.WriteString(") THEN true ELSE current_setting('" + pgNotAcquiredSetting + "')::bool END")
	if iso {
		b.WriteString(", current_setting('transaction_isolation')")
	}
	b.WriteString("; ")
	b.WriteString(o.then.stmt)
	return b.String(), l
}

// lockRefused reports whether err is a lock message's "not acquired": the
// wait's lock_timeout expired, or the try-once lock of pgThenMessage
// raised. (A statement timeout, a set's budget among them, is "not
// acquired" with the server's error kept: failed.)
func lockRefused(err error, wait bool) bool {
	if wait {
		return SQLState(err) == sqlStateLockNotAvailable
	}
	return raised(err, pgNotAcquiredSetting)
}

// raised reports whether err is the error of reading setting, which does
// not exist (42704), as the protocol's statements raise on purpose.
func raised(err error, setting string) bool {
	return SQLState(err) == "42704" && strings.Contains(err.Error(), setting)
}

// tagRows is the count at the end of a command tag ("INSERT 0 1": 1), -1
// when it has none.
func tagRows(tag string) int64 {
	n, err := strconv.ParseInt(tag[strings.LastIndexByte(tag, ' ')+1:], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// CommitWith makes fn's transaction q, begun by BeginLocked for o, send
// update before its COMMIT in the message that commits (where q is a
// *OneMessageTx, or the *sql.Tx of a wrapped connector's pool whose BEGIN
// carried the lock, and the lock message carried o's statement of SetThen;
// reports false otherwise, and the caller sends update itself). update
// must affect exactly one row: it is sent as
//
//	WITH f AS (update RETURNING 1) SELECT CASE WHEN count(*) = 1 THEN true ELSE <raise> END FROM f; COMMIT
//
// so that any other count raises, the server skips the COMMIT, and Commit
// rolls back and returns an error wrapping errs.ErrLockLost (the claim was
// no longer this run's); Rollback sends no update.
func CommitWith(o *Op, q Querier, update string) bool {
	if o.then == nil || !o.then.ran || o.then.err != nil {
		return false
	}
	_, one := q.(*OneMessageTx)
	_, wrapped := q.(*sql.Tx)
	if wrapped = wrapped && o.then.wtx != nil; !one && !wrapped {
		return false
	}
	o.then.before = "WITH f AS (" + update + " RETURNING 1) SELECT CASE WHEN count(*) = 1 THEN true ELSE current_setting('" +
		pgClaimLostSetting + "')::bool END FROM f; "
	if wrapped {
		o.then.wtx.beforeCommit = o.then.before
	}
	return true
}

// commitBefore is the transaction and the statement CommitWith put before
// its COMMIT, if any.
func (t *LockedTx) commitBefore() (*OneMessageTx, string) {
	ct, ok := t.Tx.(*OneMessageTx)
	if !ok || t.op.then == nil {
		return nil, ""
	}
	return ct, t.op.then.before
}

// endFailed answers a COMMIT message whose statement before COMMIT failed
// (err), which left the transaction failed on a live connection: ROLLBACK,
// then the error, ErrLockLost when that statement refused the commit.
func endFailed(ctx context.Context, w PgWire, err error) (idle bool, _ error) {
	if w.TxStatus() == 'E' {
		idle, _ = pgEnd(ctx, w, "ROLLBACK", nil)
	}
	if raised(err, pgClaimLostSetting) {
		return idle, errs.Mark(errs.ErrLockLost, nil, "the ledger row was no longer this run's claim before COMMIT, which was not sent")
	}
	return idle, errs.Wrap(err, "the statement before COMMIT (COMMIT not sent)")
}
