package lockproto

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"time"
)

// PostgreSQL: a shape of several server locks (All, Semaphore) in the
// message that begins the transaction (onemsg.go), as one statement whose
// order of evaluation PostgreSQL documents: a CASE evaluates its WHEN
// conditions in order and stops at the first true one ("CASE does not
// evaluate any subexpressions that are not needed to determine the
// result"; the lock functions are volatile, so none is folded ahead of
// time). So a shape costs the round trips of one key:
//
//   - All, try-once: every key in canonical order, stopping at the first
//     refusal; the keys taken before it are given back by the ROLLBACK
//     that follows (transaction-level locks):
//
//     SELECT CASE WHEN NOT pg_try_advisory_xact_lock((k1)::int8) THEN false
//     WHEN NOT pg_try_advisory_xact_lock((k2)::int8) THEN false … ELSE true END
//
//   - All with a wait: the keys in canonical order, the whole statement
//     bounded by the one budget: a statement before it sets
//     statement_timeout (the time the lock statement may run, all keys
//     together: PostgreSQL 13 and later time each statement of a message
//     on its own) and lock_timeout (each key's wait, never 0, which would
//     disable it) to the budget, saving both; the lock statement sets them
//     back after the last key. A key not granted in time raises
//     lock_not_available (55P03), "not acquired"; the budget spent over
//     several keys, the statement timeout's query_canceled (57014), "not
//     acquired" with that error kept (failed), as a server's own statement
//     timeout is for one key. Either ends the message, and the transaction
//     is rolled back. (Setting
//     lock_timeout before each key to what is left of the budget, the
//     other way, costs the server an expression per key to parse and plan,
//     which measured 2.4 times the whole of this statement.) The client's
//     deadline stays the authority (stmtCtx): the caller's context cancels
//     the statement.
//
//     SELECT set_config('ormlock.lock_timeout', current_setting('lock_timeout'), true),
//       set_config('ormlock.statement_timeout', current_setting('statement_timeout'), true),
//       set_config('lock_timeout', '2000ms', true), set_config('statement_timeout', '2000ms', true);
//     SELECT CASE WHEN pg_advisory_xact_lock((k1)::int8) IS NULL THEN NULL
//     WHEN pg_advisory_xact_lock((k2)::int8) IS NULL THEN NULL …
//     ELSE set_config('lock_timeout', current_setting('ormlock.lock_timeout'), true) IS NOT NULL
//       AND set_config('statement_timeout', current_setting('ormlock.statement_timeout'), true) IS NOT NULL END
//
//   - Semaphore: the first free slot, tried from slot 1 up (never a
//     planner-ordered scan, which could take two slots), its number the
//     answer (0: every slot held). With a wait, further rounds of the same
//     statement follow in the transaction, with the backoff of shapes.go,
//     while the wait's budget lasts. When the semaphore is refused, the
//     message of its ROLLBACK first asks pg_locks whether slot n+1 is held
//     (slotProbe, rollbackRefused): a winner's message never plans it.
//
//     SELECT CASE WHEN pg_try_advisory_xact_lock((s1)::int8) THEN 1 … WHEN
//     pg_try_advisory_xact_lock((s10)::int8) THEN 10 ELSE 0 END
//
// Keys are integer literals (strconv), never text from a caller. Where the
// one message does not apply (a driver other than pgx, GORM's
// PrepareStmt, a savepoint of the caller's transaction, shared lock
// connections), shapes.go's statement per key is taken instead.

// pgShapeMessage is the query string that begins the transaction with
// begin and takes shape t: for a Session (long), transaction_timeout is
// turned off first (as pgLockMessage does); wait > 0 is the bounded wait
// (All) or the first round of the wait (Semaphore). The statement's
// first column is the shape's result, followed by the columns of its
// layout.
func pgShapeMessage(begin string, t Target, wait time.Duration, long, iso bool) (string, lockLayout) {
	var b strings.Builder
	b.Grow(128 + 160*len(t.items))
	b.WriteString(begin)
	if long {
		b.WriteString("; ")
		b.WriteString(pgKeepTransaction)
	}
	b.WriteString("; ")
	pgShapeStmt(&b, t, wait)
	if long {
		b.WriteString(", (SELECT setting::int8 FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout')")
	}
	if iso {
		b.WriteString(", current_setting('transaction_isolation')")
	}
	return b.String(), lockLayout{long: long, iso: iso, slot: t.anyOne()}
}

// pgShapeStmt writes the SELECT that takes shape t (see above); for All
// with a wait, after a statement of its own that sets the budget.
func pgShapeStmt(b *strings.Builder, t Target, wait time.Duration) {
	switch {
	case t.anyOne():
		b.WriteString("SELECT CASE")
		for i, it := range t.items {
			b.WriteString(" WHEN ")
			pgLockFn(b, it, true)
			b.WriteString(" THEN ")
			b.WriteString(strconv.Itoa(i + 1))
		}
		b.WriteString(" ELSE 0 END")
	case wait > 0:
		budget := "'" + strconv.FormatInt(min(max(wait.Milliseconds(), 1), pgMaxLockTimeout), 10) + "ms'"
		b.WriteString("SELECT set_config('ormlock.lock_timeout', current_setting('lock_timeout'), true), " +
			"set_config('ormlock.statement_timeout', current_setting('statement_timeout'), true), " +
			"set_config('lock_timeout', " + budget + ", true), set_config('statement_timeout', " + budget + ", true); SELECT CASE")
		for _, it := range t.items {
			b.WriteString(" WHEN ")
			pgLockFn(b, it, false)
			b.WriteString(" IS NULL THEN NULL")
		}
		b.WriteString(" ELSE set_config('lock_timeout', current_setting('ormlock.lock_timeout'), true) IS NOT NULL" +
			" AND set_config('statement_timeout', current_setting('ormlock.statement_timeout'), true) IS NOT NULL END")
	default:
		b.WriteString("SELECT CASE")
		for _, it := range t.items {
			b.WriteString(" WHEN NOT ")
			pgLockFn(b, it, true)
			b.WriteString(" THEN false")
		}
		b.WriteString(" ELSE true END")
	}
}

// pgLockFn writes the transaction-level lock call of item it, its key as
// literals: pg_try_advisory_xact_lock((k)::int8) and its forms.
func pgLockFn(b *strings.Builder, it lockItem, try bool) {
	b.WriteString("pg_")
	if try {
		b.WriteString("try_")
	}
	b.WriteString("advisory_xact_lock")
	if it.shared {
		b.WriteString("_shared")
	}
	b.WriteString("(")
	pgKeyArgs(b, it.pg)
	b.WriteString(")")
}

// pgHeldLiteral writes the condition that item it's advisory lock is
// granted to anyone in the current database (pgProbeCol's, with literals).
func pgHeldLiteral(b *strings.Builder, it lockItem) {
	c, o, s := PGLockTag(it.pg)
	b.WriteString("EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted" +
		" AND database = (SELECT oid FROM pg_database WHERE datname = current_database())" +
		" AND classid::int8 = " + strconv.FormatUint(uint64(c), 10) +
		" AND objid::int8 = " + strconv.FormatUint(uint64(o), 10) +
		" AND objsubid = " + strconv.Itoa(s) + ")")
}

// pgShapeRounds follows the first message of a semaphore with a wait
// (x's exchange, which sendErr ended): when every slot was held, it sends
// further rounds of the slots' statement in the transaction, with the
// backoff of shapes.go, while the phase lasts (no round starts after it).
// The first message's reply is kept but for the lock's result. Anything
// else is left as it is.
func pgShapeRounds(ctx context.Context, o *Op, x *lockExchange, wait time.Duration, sendErr error) error {
	if !o.target.anyOne() || sendErr != nil || x.rep.ok || wait <= 0 || x.status != 'T' || x.rep.level != sql.LevelDefault {
		return sendErr // taken, try-once, failed, or given back (snapshot level)
	}
	first := x.rep
	var b strings.Builder
	pgShapeStmt(&b, o.target, 0)
	stmt := b.String()
	ph := o.phase(ctx, wait)
	for pause := semRetryMin; ; pause = min(2*pause, semRetryMax) {
		left := time.Until(ph.end)
		if left <= 0 || !sleepCtx(ctx, min(pause, left)) || ph.over() {
			x.rep = first
			return nil
		}
		if err := x.send(stmt, lockLayout{slot: true}); err != nil || x.status != 'T' {
			return err
		}
		if x.rep.ok {
			first.ok, first.slot = true, x.rep.slot
			x.rep = first
			return nil
		}
	}
}

// rollbackRefused ends the transaction of a lock message that did not
// take the lock (clean: refused, the transaction open and sound) with
// ROLLBACK. For a semaphore refused cleanly, the same message first asks
// whether slot n+1 is held (slotProbe), whose answer is reported: the
// probe rides on the ROLLBACK a loser sends anyway, so a winner's message
// does not carry it.
func rollbackRefused(ctx context.Context, o *Op, tx *OneMessageTx, cancel context.CancelFunc, clean bool) {
	if !clean || !o.target.anyOne() {
		_ = withinGrace(ctx, cancel, tx.Rollback)
		return
	}
	p, stmt := refusedProbe(o)
	_ = withinGrace(ctx, cancel, func() error { return tx.endRead(stmt+"ROLLBACK", &p.seen) })
	o.reportProbe(ctx, p)
}

// refusedProbe is the probe of a semaphore refused cleanly, whether its
// slot n+1 is held, and the statement that asks it before ROLLBACK in the
// same message ("SELECT …; ").
func refusedProbe(o *Op) (*slotProbe, string) {
	var b strings.Builder
	b.WriteString("SELECT ")
	pgHeldLiteral(&b, o.target.above)
	b.WriteString("; ")
	return &slotProbe{it: o.target.above}, b.String()
}
