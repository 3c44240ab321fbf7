package lockproto

import (
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
)

// leaseHeld is one acquisition's lease: the rows it wrote (one key, a
// set's keys, a semaphore's slot), the holder id that names it in them,
// and its own deadline on the monotonic clock, past which it counts
// itself lost whatever the server says.
type leaseHeld struct {
	o      *Op
	m      leaseMech
	db     *sql.DB
	table  string // the lease table, quoted
	fence  string // the fence table, quoted
	holder string
	owner  string
	ttl    time.Duration
	shared bool       // Shared(k): the key row, joined, and a reader row
	rows   []leaseRow // the rows held, with their epochs

	mu       sync.Mutex
	deadline time.Time   // when the lease counts itself lost (monotonic)
	timer    *time.Timer // fires at deadline
	done     bool        // released or lost: no more renewals
	lostErr  error       // why it was lost, once it was
	onLost   func(err error)
	batch    *renewBatch // the renewals' batch, while in one (guarded by renewMu)
	// flying counts the renewal statements naming the lease under way,
	// landed is closed when the last of them ended (leaserenew.go,
	// board and land): a release waits for them (leaserelease.go).
	flying int
	landed chan struct{}
}

// leaseMargin is how much of a lease's TTL its holder gives up to the
// server's clock: the holder counts its lease lost ttl - leaseMargin after
// it sent the statement that acquired or last renewed it (a tenth of the
// TTL, at least 50ms), so that a server clock running fast by less than
// that cannot have expired it first.
func leaseMargin(ttl time.Duration) time.Duration { return max(ttl/10, 50*time.Millisecond) }

// leaseEvery is the renewal interval: a third of the TTL.
func leaseEvery(ttl time.Duration) time.Duration { return ttl / 3 }

// errLeaseExpired says that a lease's own deadline passed without a
// successful renewal.
var errLeaseExpired = fmt.Errorf("the lease was not renewed before its deadline (its TTL less the margin for the server's clock)")

// errLeaseTaken says that a renewal or the check before COMMIT found the
// lease's row taken over, changed or gone.
var errLeaseTaken = fmt.Errorf("the lease's row was taken over, changed or removed")

// newLeaseHeld readies o's lease on db; nothing is sent.
func newLeaseHeld(o *Op, m leaseMech, db *sql.DB) (*leaseHeld, error) {
	t, err := NewLeaseTable(o.Dialect, o.Cfg.LeaseTableName())
	if err != nil {
		return nil, err
	}
	f, err := NewFenceTable(o.Dialect, o.Cfg.LedgerTable)
	if err != nil {
		return nil, err
	}
	var id [16]byte
	_, _ = crand.Read(id[:]) // crypto/rand never fails
	owner := o.Cfg.Owner
	if owner == "" {
		owner = leaseOwner()
	}
	return &leaseHeld{o: o, m: m, db: db, table: t.q, fence: f.q, holder: hex.EncodeToString(id[:]), owner: owner, ttl: o.Cfg.Lease,
		shared: o.target.sharedOne()}, nil
}

// candidates are the row sets one try may take: every item at once (one
// key, a set), or each slot of a semaphore on its own, in order; in share
// mode, the key row (shared by its readers: no holder) and the holder's
// reader row.
func (h *leaseHeld) candidates() [][]leaseRow {
	ns := h.o.Cfg.Namespace
	items := h.o.target.each()
	if h.shared {
		k := FenceID(items[0].key)
		return [][]leaseRow{{{ns: ns, key: k}, {ns: ns, key: k, reader: h.holder, holder: h.holder}}}
	}
	if h.o.target.anyOne() {
		out := make([][]leaseRow, len(items))
		for i, it := range items {
			out[i] = []leaseRow{{ns: ns, key: FenceID(it.key), holder: h.holder}}
		}
		return out
	}
	rows := make([]leaseRow, len(items))
	for i, it := range items {
		rows[i] = leaseRow{ns: ns, key: FenceID(it.key), holder: h.holder}
	}
	return [][]leaseRow{rows}
}

// acquire takes o's lease: a try of each candidate row set, repeated with
// a backoff while o's wait (WithWait, within ctx's deadline) lasts. It
// reports the outcome as every lock path does (attempt, settle).
func (h *leaseHeld) acquire(ctx context.Context) error {
	wait, bounded, err := attempt(ctx, h.o)
	if err != nil {
		return err
	}
	end := time.Now().Add(wait)
	backoff := 5 * time.Millisecond
	for {
		sent := time.Now()
		// a try is let finish once ctx ended (GraceCtx: a statement cut
		// under way may still be granted after the call returned, which a
		// release sent before it could not undo); a grant that came as
		// ctx ended is given back here
		tctx, done := GraceCtx(ctx)
		ok, err := h.tryAll(tctx)
		done()
		if err == nil && ok && ctx.Err() != nil {
			ok, err = false, errs.Join(ctx.Err(), h.free(ctx, false))
		}
		if err != nil || ok {
			if ok {
				h.deadline = sent.Add(h.ttl - leaseMargin(h.ttl))
			}
			return settle(ctx, h.o, ok, false, err)
		}
		left := time.Until(end)
		if left <= 0 {
			return settle(ctx, h.o, false, bounded, nil)
		}
		d := min(backoff/2+rand.N(backoff/2+1), left)
		backoff = min(2*backoff, max(leaseEvery(h.ttl)/2, 10*time.Millisecond), time.Second)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return notAcquired(ctx, h.o, ctxErr(ctx))
		case <-t.C:
		}
	}
}

// tryAll tries each candidate in turn until one is taken.
func (h *leaseHeld) tryAll(ctx context.Context) (bool, error) {
	for _, rows := range h.candidates() {
		ok, err := h.tryAgain(ctx, rows)
		if err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

// leaseDeadlockTries bounds the tries of one candidate that the server
// ended as a deadlock victim.
const leaseDeadlockTries = 4

// tryAgain is try, again after a deadlock: on MySQL/MariaDB the acquire's
// reads of the high-water mark and the fencing counter take shared gap
// locks (INSERT ... SELECT at REPEATABLE READ), so acquirers of different
// keys of one namespace can deadlock each other; the victim, which wrote
// nothing, tries again after a short jittered pause. A certification
// conflict on Galera is reported as a deadlock too: there the other node
// wrote the key's row, and the next try finds it held.
func (h *leaseHeld) tryAgain(ctx context.Context, rows []leaseRow) (bool, error) {
	for i := 1; ; i++ {
		ok, err := h.try(ctx, rows)
		if err == nil || !lockDeadlock(err) || i == leaseDeadlockTries || ctx.Err() != nil {
			return ok, err
		}
		time.Sleep(time.Duration(1+rand.N(4*i)) * time.Millisecond)
		for j := range rows {
			rows[j].epoch = 0
		}
	}
}

// try takes every row of rows or none: one statement for one row, a short
// transaction of its own for several (a set), committed only when every
// row was taken. A statement cut short by ctx may have been granted: the
// holder's rows are then expired (release) before the error returns.
func (h *leaseHeld) try(ctx context.Context, rows []leaseRow) (bool, error) {
	ttl := h.ttl.Microseconds()
	if h.shared {
		return h.took(ctx, rows, h.m.sql.acquireShared(ctx, h.db, h.table, h.fence, ttl, h.owner, rows))
	}
	if len(rows) == 1 {
		err := h.m.sql.acquired(ctx, h.db, h.m.sql.acquireSQL(h.table, h.fence, 1), h.m.sql.acquireArgs(ttl, h.owner, h.holder, rows), rows)
		return h.took(ctx, rows, err)
	}
	tx, err := h.db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	err = h.acquireEach(ctx, tx, rows, ttl)
	ok := err == nil && allTaken(rows)
	if !ok {
		_ = tx.Rollback()
		return false, h.wrap(err)
	}
	if err := tx.Commit(); err != nil {
		return h.took(ctx, rows, err)
	}
	return h.took(ctx, rows, nil)
}

// acquireEach writes rows in tx: in one statement where the family takes
// several rows at once (PostgreSQL), else one by one, in rows' order.
func (h *leaseHeld) acquireEach(ctx context.Context, tx *sql.Tx, rows []leaseRow, ttl int64) error {
	if h.m.sql.multiRow() {
		return h.m.sql.acquired(ctx, tx, h.m.sql.acquireSQL(h.table, h.fence, len(rows)), h.m.sql.acquireArgs(ttl, h.owner, h.holder, rows), rows)
	}
	for i := range rows {
		r := rows[i : i+1]
		if err := h.m.sql.acquired(ctx, tx, h.m.sql.acquireSQL(h.table, h.fence, 1), h.m.sql.acquireArgs(ttl, h.owner, h.holder, r), r); err != nil {
			return err
		}
		if r[0].epoch == 0 {
			return nil
		}
	}
	return nil
}

func allTaken(rows []leaseRow) bool {
	for _, r := range rows {
		if r.epoch <= 0 {
			return false
		}
	}
	return true
}

// took settles a try whose statement (or COMMIT) returned err: taken, not
// taken, or failed; a failure may have been granted by the server (ctx
// ended as it ran), so the holder's rows are expired before it returns.
func (h *leaseHeld) took(ctx context.Context, rows []leaseRow, err error) (bool, error) {
	if err == nil {
		if !allTaken(rows) {
			return false, nil
		}
		if err = h.raiseFence(ctx, rows); err == nil { // leasefence.go
			h.rows = rows
			return true, nil
		}
	}
	h.rows = rows
	_ = h.free(ctx, false)
	h.rows = nil
	return false, h.wrap(err)
}

func (h *leaseHeld) wrap(err error) error {
	if err == nil {
		return nil
	}
	if h.o.Dialect.server().MissingTable(err) {
		return errs.Wrap(err, "lease table %s or fence table %s does not exist (create them with Migrate, or run MigrateSQL's statements)", h.table, h.fence)
	}
	return errs.Wrap(err, "lease table %s: acquire %q", h.table, h.o.Key.String())
}

// token is the fencing token of the lease: the epoch of its one row (one
// key, a semaphore's slot), none for a set or a shared key.
func (h *leaseHeld) token() int64 {
	if len(h.rows) != 1 || h.shared {
		return 0
	}
	return h.rows[0].epoch
}

// check touches every row of the lease in fn's transaction tx, by (key,
// epoch, holder, not expired): the row locks it takes last until tx ends,
// so no takeover can commit between the check and tx's COMMIT, and a
// lease taken over or expired makes it fail with errLeaseTaken.
func (h *leaseHeld) check(ctx context.Context, tx Tx) error {
	q := h.m.sql.checkSQL(h.table)
	for _, r := range h.rows {
		res, err := tx.ExecContext(ctx, q, r.ns, r.key, r.reader, r.epoch, r.holder)
		if err != nil {
			return errs.Wrap(err, "lease table %s: check the lease of %q before COMMIT", h.table, h.o.Key.String())
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return errs.Mark(errs.ErrLockLost, errLeaseTaken, "%q: epoch %d, before COMMIT", h.o.Key.String(), r.epoch)
		}
	}
	return nil
}

// start arms the lease's deadline, which calls lost with errLeaseExpired
// when no renewal moved it in time; onLost hears of a loss.
func (h *leaseHeld) start(onLost func(err error)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.onLost = onLost
	h.timer = time.AfterFunc(time.Until(h.deadline), func() { h.lose(errLeaseExpired) })
}

// renewed moves the deadline after a renewal sent at sent succeeded.
func (h *leaseHeld) renewed(sent time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return
	}
	if d := sent.Add(h.ttl - leaseMargin(h.ttl)); d.After(h.deadline) {
		h.deadline = d
		h.timer.Reset(time.Until(d))
	}
}

// lose marks the lease lost (once) and tells onLost.
func (h *leaseHeld) lose(err error) {
	h.mu.Lock()
	if h.done {
		h.mu.Unlock()
		return
	}
	h.done, h.lostErr = true, err
	f := h.onLost
	h.mu.Unlock()
	if f != nil {
		f(err)
	}
}

// stop ends renewals and the deadline, once fn has returned, and returns
// why the lease was lost, if it was.
func (h *leaseHeld) stop() error {
	unrenew(h)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.done = true
	if h.timer != nil {
		h.timer.Stop()
	}
	return h.lostErr
}

// active reports whether the lease is still renewed.
func (h *leaseHeld) active() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.done
}

// emitLost tells o's observer of a loss.
func (h *leaseHeld) emitLost(ctx context.Context, err error) {
	h.o.Emit(ctx, config.EventLockLost, err)
}
