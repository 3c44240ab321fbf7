// The statements of the lock shapes on each server (shapes.go takes them).

package lockproto

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
)

// pgLockCall is the lock function and arguments of item it: xact or
// session level, try or wait, share mode or not.
func pgLockCall(it lockItem, xact, try bool) (string, []any) {
	fn := "pg_"
	if try {
		fn += "try_"
	}
	fn += "advisory_"
	if xact {
		fn += "xact_"
	}
	fn += "lock"
	if it.shared {
		fn += "_shared"
	}
	params, args := pgKeyParams(it.pg)
	return fn + params, args
}

// pgKeyParams are the parameters of an advisory lock function's call on
// k, and their arguments: ($1::int8) or, for a pair, ($1::int4, $2::int4).
func pgKeyParams(k keys.PostgresKey) (string, []any) {
	if k.IsPair {
		return "($1::int4, $2::int4)", []any{k.ClassID, k.ObjID}
	}
	return "($1::int8)", []any{k.Int64}
}

// pgTryItem tries item it's lock on q (transaction or session level); the
// statement also reads the columns cols into dest (the transaction's
// isolation: see snapshotTaken, then errSnapshotTaken) and, with probe,
// whether probe's lock is held.
func pgTryItem(ctx context.Context, q Querier, it lockItem, xact bool, probe *slotProbe, cols string, dest ...any) (bool, error) {
	call, args := pgLockCall(it, xact, true)
	var ok bool
	query, all := "SELECT "+call+cols, append([]any{&ok}, dest...)
	if probe != nil {
		c, o, sub := PGLockTag(probe.it.pg)
		query += pgProbeCol(len(args))
		args, all = append(args, int64(c), int64(o), sub), append(all, &probe.seen)
	}
	if err := q.QueryRowContext(ctx, query, args...).Scan(all...); err != nil {
		return false, errs.Wrap(err, "%s", call)
	}
	if len(dest) > 0 && snapshotTaken(dest[0].(*string)) {
		return false, errSnapshotTaken
	}
	return ok, nil
}

// pgProbeCol is the column that says whether an advisory lock of the
// current database is granted to anyone (pg_locks), its classid, objid and
// objsubid the parameters after the n-th.
func pgProbeCol(n int) string {
	p := func(i int) string { return "$" + strconv.Itoa(n+i) }
	return ", EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted" +
		" AND database = (SELECT oid FROM pg_database WHERE datname = current_database())" +
		" AND classid::int8 = " + p(1) + "::int8 AND objid::int8 = " + p(2) + "::int8 AND objsubid = " + p(3) + "::int2)"
}

// pgWaitItemXact waits up to wait for item it's transaction-level lock on
// the transaction q, bounded by lock_timeout (restored once the lock is
// held), as PGWaitXact does for one key. A timeout returns false and
// leaves the transaction aborted: the caller rolls it back.
func pgWaitItemXact(ctx context.Context, q Querier, it lockItem, wait time.Duration, cols string, dest ...any) (bool, error) {
	ms := min(max(wait.Milliseconds(), 1), pgMaxLockTimeout)
	var prev string
	if err := q.QueryRowContext(ctx, "SELECT current_setting('lock_timeout'), set_config('lock_timeout', $1, true)"+cols,
		strconv.FormatInt(ms, 10)+"ms").Scan(append([]any{&prev, new(string)}, dest...)...); err != nil {
		return false, errs.Wrap(err, "set lock_timeout")
	}
	if len(dest) > 0 && snapshotTaken(dest[0].(*string)) {
		return false, errSnapshotTaken
	}
	call, args := pgLockCall(it, true, false)
	args = append(args, prev)
	_, err := q.ExecContext(ctx, "SELECT "+call+", set_config('lock_timeout', $"+strconv.Itoa(len(args))+", true)", args...)
	if err != nil {
		if SQLState(err) == sqlStateLockNotAvailable {
			return false, nil
		}
		return false, errs.Wrap(err, "%s", call)
	}
	return true, nil
}

// pgUnlockItem releases item it's session-level lock on q.
func pgUnlockItem(ctx context.Context, q Querier, it lockItem) error {
	call := "pg_advisory_unlock"
	if it.shared {
		call += "_shared"
	}
	params, args := pgKeyParams(it.pg)
	call += params
	var ok bool
	if err := q.QueryRowContext(ctx, "SELECT "+call, args...).Scan(&ok); err != nil {
		return errs.Wrap(err, "pg_advisory_unlock")
	}
	if !ok {
		return fmt.Errorf("%w: %s returned false", ErrNotHeld, call)
	}
	return nil
}

// acquireShape is acquireXact for a shape: its transaction-level locks on
// the open transaction q (iso as there: the isolation is read by a
// statement of its own first). Locks taken before a refusal are given back
// by the transaction's end, which the caller's failure path runs.
func (pgAdvisory) acquireShape(ctx context.Context, o *Op, q Querier, iso *string) error {
	wait, bounded, err := attempt(ctx, o)
	if err != nil {
		return err
	}
	// the first statement also reads the transaction's isolation (iso)
	isoCol := func() (string, []any) {
		if iso == nil {
			return "", nil
		}
		col, dest := ", current_setting('transaction_isolation')", []any{iso}
		iso = nil
		return col, dest
	}
	try := func(it lockItem, probe *slotProbe) (bool, error) {
		sctx, done := stmtCtx(ctx, false, o.cancel)
		defer done()
		col, dest := isoCol()
		return pgTryItem(sctx, q, it, true, probe, col, dest...)
	}
	var waitFor func(lockItem, time.Duration) (bool, error)
	if wait > 0 {
		waitFor = func(it lockItem, left time.Duration) (bool, error) {
			sctx, done := stmtCtx(ctx, true, o.cancel)
			defer done()
			col, dest := isoCol()
			return pgWaitItemXact(sctx, q, it, left, col, dest...)
		}
	}
	ok, err := o.held.takeShape(o.target, o.phase(ctx, wait), shapeSteps{try: try, waitFor: waitFor, report: o.reportProbe})
	if errors.Is(err, errSnapshotTaken) {
		return err
	}
	if err == nil && ok && ctx.Err() != nil {
		ok = false // the caller's ROLLBACK gives the locks back
	}
	return o.settleShape(ctx, ok, bounded, err)
}

// lockDeadlock reports whether err is the server's deadlock error for a
// lock wait: PostgreSQL's deadlock_detected (40P01), MySQL's
// ER_USER_LOCK_DEADLOCK (3058) or the deadlock MariaDB reports for
// GET_LOCK (ER_LOCK_DEADLOCK, 1213). The lock was not taken.
func lockDeadlock(err error) bool {
	return SQLState(err) == "40P01" || isMySQLErrno(err, 3058, 1213)
}

// localLocks are the keys this process reserves for t on its shared lock
// connections (sharedconn.go): its one key, or the items of its shape in
// order (a semaphore's slots each on their own).
func (t Target) localLocks() []localLock {
	items := t.each()
	out := make([]localLock, len(items))
	for i, it := range items {
		out[i] = t.mech.local(it)
	}
	return out
}

// localLock is one server lock as this process's set of held keys names
// it, and its mode.
type localLock struct {
	key    any
	shared bool
}

// reservations are what each try of t on a shared lock connection
// reserves in this process, in the order tried: every key at once (one
// key, All, Shared), or each slot of a semaphore on its own, from a random
// one.
func (t Target) reservations() [][]localLock {
	locks := t.localLocks()
	if !t.anyOne() {
		return [][]localLock{locks}
	}
	start := rand.IntN(len(locks))
	out := make([][]localLock, len(locks))
	for j := range locks {
		out[j] = locks[(start+j)%len(locks) : (start+j)%len(locks)+1]
	}
	return out
}

// sharedTry tries items' session-level locks (m's) on c in order while
// the phase lasts; when one is refused, or the phase ends first, those
// taken are given back.
func (h *heldItems) sharedTry(ctx context.Context, m Mechanism, c *sharedConn, items []lockItem, ph lockPhase, probe *slotProbe) (bool, error) {
	*h = (*h)[:0]
	for _, it := range items {
		var got bool
		var err error
		switch {
		case ph.over():
			err = errPhaseOver // nothing more is sent
		default:
			got, err = m.tryItem(ctx, c.conn, it, probe)
		}
		if err != nil || !got {
			return false, h.giveBack(err, func([]lockItem) error { return h.sharedUndo(ctx, m, c) })
		}
		*h = append(*h, it)
	}
	return true, nil
}

// itemsOf are the lock items of t whose local names are res.
func (t Target) itemsOf(res []localLock) []lockItem {
	var out []lockItem
	for _, it := range t.items {
		for _, l := range res {
			if t.mech.local(it) == l {
				out = append(out, it)
				break
			}
		}
	}
	return out
}

// sharedUndo releases the session-level locks (m's) taken on c so far.
func (h *heldItems) sharedUndo(ctx context.Context, m Mechanism, c *sharedConn) error {
	var err error
	for i := len(*h) - 1; i >= 0; i-- {
		err = errs.Join(err, m.unlockItem(ctx, c.conn, (*h)[i]))
	}
	*h = (*h)[:0]
	return err
}
