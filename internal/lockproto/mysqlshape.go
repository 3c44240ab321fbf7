package lockproto

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/ormlock/ormlock/internal/errs"
)

// The statements of a lock shape (All, Semaphore) on MySQL/MariaDB, on a
// pinned connection. All of n tried once is one statement that tries every
// name, SELECT GET_LOCK(a, 0), GET_LOCK(b, 0), …: a try never waits, so
// the order in which the server evaluates the select list (which MySQL
// does not document) does not matter; those it took are released by one
// statement, SELECT RELEASE_LOCK(…), … (mysqlReleaseItems). A wait keeps
// the ordered path (a GET_LOCK per name in the canonical order, each
// waiting for what is left of the one budget), as does a semaphore (each
// slot tried on its own from a random one). When a statement of several
// lock calls fails, which of them took their lock is unknown: its error
// (errSeveralLocks) makes the caller destroy the connection, which frees
// every lock it holds (never RELEASE_ALL_LOCKS, which would also free the
// locks of others on a shared lock connection).

// acquireShape is acquire for a shape (All, Semaphore): GET_LOCK of each
// name on the pinned connection q, whose first statement also reads the
// session's settings. A refused All releases the names it took before
// returning. The lock phase (lockPhase) bounds the whole call: no GET_LOCK
// is sent once it is over, and the one under way then, and the releases of
// the names taken, are cut endGrace after it ended (the caller then
// destroys the connection, which frees its locks).
func (mysqlNamed) acquireShape(ctx context.Context, o *Op, q Querier) error {
	wait, bounded, err := attempt(ctx, o)
	if err != nil {
		return err
	}
	ph := o.phase(ctx, wait)
	pctx, pdone := ph.graceCtx()
	defer pdone()
	// the first GET_LOCK also reads the session's settings, as one key's does
	o.my = mysqlLockConnVars{autocommit: 1}
	sess := &o.my
	first := func() *mysqlLockConnVars {
		v := sess
		sess = nil
		return v
	}
	undo := func(held []lockItem) error {
		rctx, cancel := context.WithTimeout(pctx, releaseTimeout)
		defer cancel()
		return mysqlReleaseItems(rctx, q, held)
	}
	var ok bool
	if wait <= 0 && !o.target.anyOne() {
		ok, err = o.held.tryAll(o.target, ph, pctx, q, first(), undo)
	} else {
		try := func(it lockItem, probe *slotProbe) (bool, error) {
			// as acquire's try-once: let finish, within the phase's grace
			return mysqlGetLockProbe(pctx, q, it.mysql, 0, first(), probe)
		}
		var waitFor func(lockItem, time.Duration) (bool, error)
		if wait > 0 {
			waitFor = func(it lockItem, left time.Duration) (bool, error) {
				wctx, done := stmtCtx(ctx, true, o.cancel)
				defer done()
				wctx, stop := cutWith(wctx, pctx)
				defer stop()
				return mysqlGetLock(wctx, q, it.mysql, left, first())
			}
		}
		ok, err = o.held.takeShape(o.target, ph, shapeSteps{try: try, waitFor: waitFor, undo: undo, report: o.reportProbe})
	}
	if err == nil && ok && ctx.Err() != nil {
		err = undo(o.held) // the locks came as the caller gave up
		ok, o.held = false, o.held[:0]
	}
	return o.settleShape(ctx, ok, bounded, err)
}

// tryAll tries every name of the set t once, in one statement (above),
// within the phase ph (nothing is sent once it is over), on q with ctx
// (the phase's grace); the statement also reads the session's settings
// into sess. A refusal releases with undo the names taken. h is what is
// held.
func (h *heldItems) tryAll(t Target, ph lockPhase, ctx context.Context, q Querier, sess *mysqlLockConnVars, undo func([]lockItem) error) (bool, error) {
	*h = (*h)[:0]
	if ph.over() {
		return false, errPhaseOver
	}
	res := make([]sql.NullInt64, len(t.items))
	dest := make([]any, len(res), len(res)+2)
	var b strings.Builder
	size := len("SELECT , @@autocommit, @@completion_type")
	for _, it := range t.items {
		size += mysqlStmtSize(len("GET_LOCK(, 0), "), it.mysql)
	}
	b.Grow(size)
	b.WriteString("SELECT ")
	for i, it := range t.items {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("GET_LOCK(")
		writeMySQLName(&b, it.mysql)
		b.WriteString(", 0)")
		dest[i] = &res[i]
	}
	if sess != nil {
		b.WriteString(", @@autocommit, @@completion_type")
		dest = append(dest, &sess.autocommit, &sess.completionType)
	}
	if err := q.QueryRowContext(ctx, b.String()).Scan(dest...); err != nil {
		return false, errSeveralLocks{what: "GET_LOCK", n: len(t.items), err: err}
	}
	for i, r := range res {
		if !r.Valid { // interrupted: the statement's other calls are not trusted
			return false, errSeveralLocks{what: "GET_LOCK", n: len(t.items), err: errGetLockNull}
		}
		if r.Int64 == 1 {
			*h = append(*h, t.items[i])
		}
	}
	if len(*h) == len(t.items) {
		return true, nil
	}
	return false, h.giveBack(nil, undo)
}

// errSeveralLocks is the failure of a statement of several GET_LOCK calls
// (what: the function, n of them): which of them took or gave
// back their lock is unknown, so the caller destroys the connection. The
// server's error is in its message but not in its chain: no
// classification of it (a statement timeout, say, which is a clean "not
// acquired" for one name) may hand the connection back to the pool.
type errSeveralLocks struct {
	what string
	n    int
	err  error
}

func (e errSeveralLocks) Error() string {
	return fmt.Sprintf("ormlock: a statement of %d %s calls failed, which of them took effect is unknown (the connection is closed, which frees its locks): %v", e.n, e.what, e.err)
}

// mysqlReleaseItems releases the named locks of items on q, last first,
// in one statement; anything but 1 for each is an error (ErrNotHeld), and
// a failed statement one the caller answers by destroying the connection.
func mysqlReleaseItems(ctx context.Context, q Querier, items []lockItem) error {
	switch len(items) {
	case 0:
		return nil
	case 1:
		return MySQLReleaseLock(ctx, q, items[0].mysql)
	}
	res := make([]sql.NullInt64, len(items))
	dest := make([]any, len(res))
	var b strings.Builder
	size := len("SELECT ")
	for _, it := range items {
		size += mysqlStmtSize(len("RELEASE_LOCK(), "), it.mysql)
	}
	b.Grow(size)
	b.WriteString("SELECT ")
	for i := range items {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("RELEASE_LOCK(")
		writeMySQLName(&b, items[len(items)-1-i].mysql)
		b.WriteByte(')')
		dest[i] = &res[i]
	}
	if err := q.QueryRowContext(ctx, b.String()).Scan(dest...); err != nil {
		// which were released is unknown: the caller destroys the connection
		return errs.Wrap(err, "RELEASE_LOCK of %d names", len(items))
	}
	var err error
	for i, r := range res {
		if !r.Valid || r.Int64 != 1 {
			err = errs.Join(err, fmt.Errorf("%w: RELEASE_LOCK of %q returned %v", ErrNotHeld, items[len(items)-1-i].mysql, nullInt(r)))
		}
	}
	return err
}

// nullInt is r as a message shows it: its value, or NULL.
func nullInt(r sql.NullInt64) any {
	if !r.Valid {
		return "NULL"
	}
	return r.Int64
}

// release releases what o holds on the pinned connection q: its one name,
// or the names of its shape.
func (mysqlNamed) release(ctx context.Context, o *Op, q Querier) error {
	mysqlMech.forgetOwner(ctx, o, q)
	if o.target.Simple() {
		return MySQLReleaseLock(ctx, q, o.target.mysql)
	}
	return mysqlReleaseItems(ctx, q, o.held)
}

// check is the keepalive of o's lock connection q: every name o holds is
// still held by this very connection (one statement).
func (mysqlNamed) check(ctx context.Context, o *Op, q Querier) error {
	if o.target.Simple() {
		return MySQLHeld(ctx, q, o.target.mysql)
	}
	var b strings.Builder
	b.WriteString("SELECT 0")
	for _, it := range o.held {
		b.WriteString(" + (IS_USED_LOCK(")
		writeMySQLName(&b, it.mysql)
		b.WriteString(") <=> CONNECTION_ID())")
	}
	var n int
	if err := q.QueryRowContext(ctx, b.String()).Scan(&n); err != nil {
		return errs.Wrap(err, "keepalive")
	}
	if n != len(o.held) {
		return fmt.Errorf("%w: IS_USED_LOCK no longer names this connection for %d of %d locks", ErrNotHeld, len(o.held)-n, len(o.held))
	}
	return nil
}
