package lockproto

import (
	"context"
	"database/sql"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Renewals, batched: the leases of one process on one pool, lease table
// and TTL are renewed together, one statement per interval (a third of
// the TTL, with a tenth of jitter) for all of them, in chunks of
// renewChunk rows, their rows locked in key order. A batch that fails (a
// certification conflict on Galera, a deadlock, a lock wait cut by its
// timeout, a connection error) or renews fewer rows than it sent is no
// loss by itself: its leases are then renewed one by one, and only a lease
// whose own statement found its row taken or changed (no row renewed, no
// error) is lost at once; one whose statement failed is lost only when
// its own deadline passes (leaseHeld.start).

// renewChunk is the most rows one renewal statement carries.
const renewChunk = 1024

// renewKey is what the leases of one batch share.
type renewKey struct {
	db    *sql.DB
	table string
	ttl   time.Duration
}

// renewBatch renews the leases of one renewKey on its own goroutine while
// it has any.
type renewBatch struct {
	key    renewKey
	sql    leaseSQL
	leases map[*leaseHeld]struct{} // guarded by renewMu
	quit   chan struct{}           // closed when the last lease left
}

var (
	renewMu sync.Mutex
	batches = map[renewKey]*renewBatch{}
	// renewHookP, when set (tests: SetLeaseRenewHook), is called with each
	// lease before it is renewed: false skips it (a holder whose renewals
	// stopped).
	renewHookP atomic.Pointer[func(h *leaseHeld) bool]
)

// renewing adds h to its batch, starting the batch's goroutine if it has
// none; h leaves it once stopped.
func renewing(h *leaseHeld) {
	k := renewKey{db: h.db, table: h.table, ttl: h.ttl}
	renewMu.Lock()
	defer renewMu.Unlock()
	b, ok := batches[k]
	if !ok {
		b = &renewBatch{key: k, sql: h.m.sql, leases: map[*leaseHeld]struct{}{}, quit: make(chan struct{})}
		batches[k] = b
		go b.run()
	}
	b.leases[h] = struct{}{}
	h.batch = b
}

// unrenew takes h out of its batch once it stopped; the batch's goroutine
// ends with its last lease.
func unrenew(h *leaseHeld) {
	renewMu.Lock()
	defer renewMu.Unlock()
	b := h.batch
	if b == nil {
		return
	}
	h.batch = nil
	delete(b.leases, h)
	if len(b.leases) == 0 && batches[b.key] == b {
		delete(batches, b.key)
		close(b.quit)
	}
}

// live returns the batch's active leases, dropping the stopped ones; when
// none is left the batch is removed and live returns nil.
func (b *renewBatch) live() []*leaseHeld {
	renewMu.Lock()
	defer renewMu.Unlock()
	var out []*leaseHeld
	for h := range b.leases {
		if !h.active() {
			delete(b.leases, h)
			continue
		}
		out = append(out, h)
	}
	if len(b.leases) == 0 {
		if batches[b.key] == b {
			delete(batches, b.key)
			close(b.quit)
		}
		return nil
	}
	return out
}

// run renews the batch every interval until it has no lease left.
func (b *renewBatch) run() {
	every := leaseEvery(b.key.ttl)
	for {
		jitter := time.Duration(rand.Int64N(int64(every/5)+1)) - every/10
		t := time.NewTimer(every + jitter)
		select {
		case <-b.quit:
			t.Stop()
			return
		case <-t.C:
		}
		hs := b.live()
		if hs == nil {
			return
		}
		if hook := renewHookP.Load(); hook != nil {
			kept := hs[:0]
			for _, h := range hs {
				if (*hook)(h) {
					kept = append(kept, h)
				}
			}
			hs = kept
		}
		for i := 0; i < len(hs); {
			j, n := i, 0
			for j < len(hs) && (n == 0 || n+len(hs[j].rows) <= renewChunk) {
				n += len(hs[j].rows)
				j++
			}
			b.renew(hs[i:j], n)
			i = j
		}
	}
}

// renew renews hs (n rows) in one statement, or one by one when that
// statement failed or renewed fewer rows than it named.
func (b *renewBatch) renew(hs []*leaseHeld, n int) {
	if n == 0 {
		return
	}
	sent := time.Now()
	if got, want, err := b.exec(hs); err == nil && got == want {
		for _, h := range hs {
			h.renewed(sent)
		}
		return
	}
	for _, h := range hs {
		sent := time.Now()
		got, want, err := b.exec([]*leaseHeld{h})
		switch {
		case err != nil: // not a loss until h's deadline
		case got == want:
			h.renewed(sent)
		default:
			h.lose(errLeaseTaken)
		}
	}
}

// exec sends one renewal statement for the rows of hs's leases still
// held, bounded by the interval, and returns the rows it renewed and the
// rows it named: the distinct rows of those leases (the readers of one
// shared key share its key row). A lease stopped meanwhile is left out;
// each other one is on board (board) until the statement has ended.
func (b *renewBatch) exec(hs []*leaseHeld) (got, want int64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), leaseEvery(b.key.ttl))
	defer cancel()
	seen := make(map[leaseRow]struct{})
	var rows []leaseRow
	for _, h := range hs {
		if !h.board() {
			continue
		}
		defer h.land()
		for _, r := range h.rows {
			if _, dup := seen[r]; dup {
				continue
			}
			seen[r] = struct{}{}
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return 0, 0, nil
	}
	n, args := b.sql.renewArgs(b.key.ttl.Microseconds(), rows)
	res, err := b.key.db.ExecContext(ctx, b.sql.renewSQL(b.key.table, n), args...)
	if err != nil {
		return 0, int64(len(seen)), err
	}
	got, err = res.RowsAffected()
	return got, int64(len(seen)), err
}

// SetLeaseRenewHook sets, for tests, a function asked before each lease is
// renewed, with the lease's key (its FenceID) and namespace: false skips
// the renewal, as a holder whose process stopped renewing. nil removes it.
func SetLeaseRenewHook(f func(ns, key string) bool) {
	if f == nil {
		renewHookP.Store(nil)
		return
	}
	hook := func(h *leaseHeld) bool {
		for _, r := range h.rows {
			if !f(r.ns, r.key) {
				return false
			}
		}
		return true
	}
	renewHookP.Store(&hook)
}

// Why a release waits for the renewals under way. A renewal statement
// names the lease's row with the condition that it has not expired, and
// the release expires it. On MySQL/MariaDB the renewal's "now" is its
// statement's start (UTC_TIMESTAMP): a renewal of many rows, sent before
// a release, that reaches the row after the release committed (or waited
// on its row lock) finds it expired only at the release's later time,
// counts it live and extends it for a whole TTL, so a released lease
// would stay taken by nobody until then. So a renewal boards each lease
// it names before it is sent, a lease that stopped boards no more, and
// the release waits until the renewals on board have landed
// (awaitLanded) before it is sent.

// board marks one more renewal of h under way; false when h has stopped
// (released or lost), whose rows no renewal may name any more.
func (h *leaseHeld) board() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return false
	}
	if h.flying == 0 {
		h.landed = make(chan struct{})
	}
	h.flying++
	return true
}

// land ends a renewal of h that board started.
func (h *leaseHeld) land() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.flying--; h.flying == 0 {
		close(h.landed)
		h.landed = nil
	}
}

// awaitLanded waits, once h has stopped, until no renewal of h is under
// way, or ctx ends (false).
func (h *leaseHeld) awaitLanded(ctx context.Context) bool {
	h.mu.Lock()
	ch := h.landed
	h.mu.Unlock()
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}
