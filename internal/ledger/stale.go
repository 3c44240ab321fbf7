package ledger

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
)

// Stale rows. A claim-mode run takes its (job, slot) lock (an advisory or
// named lock, or under WithLease the run key's lease) before it
// commits its 'running' claim and releases it only after it has recorded
// the end ('done' or 'failed'), so a 'running' row whose lock nobody holds
// is a run whose owner died (kill -9, a reboot, a lost connection) or lost
// the lock before it could record the end: stale. (A transactional run's
// 'running' row is never seen by another session: it commits as 'done' or
// not at all.) Nothing writes 'stale' into the ledger: Runs reports it
// (Row.Stale) and Prune deletes such rows like finished ones.
//
// The order of the reads is what makes "stale" true. The row is read
// first, then the lock, and when the lock is free the row is read again
// in a snapshot taken after the lock's read:
//
//   - a live run's lock is held from before its claim was visible (the
//     first read) to after its end is committed, so when the lock is free
//     at the second read, the run has either recorded its end, which the
//     third read sees ('done' or 'failed': not stale), or it never will;
//   - a run that takes the slot over after the lock's read writes its own
//     started_at and owner, which the third read sees: not that claim, so
//     not stale (it holds the lock now).
//
// Reading the lock first would report stale a run that took the lock and
// claimed the slot between the two reads; reading the row once would
// report stale a run that recorded its end and released the lock between
// them.

// testHookStale, when set (by the package's tests), runs between the
// first read of the rows and the lock look-ups.
var testHookStale func()

// MarkStale sets Stale on each 'running' row of rs (read from the ledger
// just before) whose run's lock is free and which is still the same claim
// when read again; a row that changed meanwhile is replaced by what the
// second read found (a run that recorded its end, or a new claim). Only
// the first limit 'running' rows are looked at (every one when limit <= 0);
// it returns how many were, so that a caller can say which were not.
//
// The locks are looked up on q, as Holder does (cfg's namespace names
// them, as it named the rows' runs); q must reach the primary. A row is
// read again in a READ COMMITTED transaction of its own on db, or on q
// when db is nil, which must then see the rows committed before each
// statement (autocommitted statements, a READ COMMITTED transaction): in
// a REPEATABLE READ or SERIALIZABLE snapshot a run that ended after the
// snapshot would be reported stale.
func (t *Table) MarkStale(ctx context.Context, q lockproto.Querier, db *sql.DB, cfg config.Config, rs []Row, limit int) (int, error) {
	if testHookStale != nil {
		testHookStale()
	}
	looked := 0
	for i := range rs {
		if rs[i].Status != StatusRunning {
			continue
		}
		if limit > 0 && looked == limit {
			break
		}
		looked++
		h, err := t.runLock(ctx, q, cfg, rs[i].Job, rs[i].Slot)
		if err != nil {
			return looked, err
		}
		if h.Held {
			rs[i].Mechanism = h.Mechanism
			continue
		}
		now, ok, err := t.reread(ctx, q, db, rs[i])
		switch {
		case err != nil:
			return looked, err
		case !ok: // gone: a Prune deleted it as stale, or a hand did
			rs[i].Stale = true
		case sameClaim(now, rs[i]):
			rs[i].Stale = true
		default:
			rs[i] = now
		}
	}
	return looked, nil
}

// sameClaim reports whether now is still r's 'running' claim: a take-over
// writes its own owner and started_at.
func sameClaim(now, r Row) bool {
	return now.Status == StatusRunning && now.Owner == r.Owner && now.Started.Equal(r.Started)
}

// runLock looks up the holder of the run (job, slot)'s lock in cfg's
// namespace, as RunOnce takes it: the server's lock and, when that is
// free, the run key's lease (LookupHolder), so that a claim under a lease
// is stale once its lease has expired, as one under a lock once the lock
// is free.
func (t *Table) runLock(ctx context.Context, q lockproto.Querier, cfg config.Config, job string, slot time.Time) (lockproto.HolderInfo, error) {
	op, err := lockproto.NewOp(t.d, "Runs", keys.RunKey(job, slot), cfg)
	if err != nil {
		return lockproto.HolderInfo{}, err
	}
	return lockproto.LookupHolder(ctx, q, op)
}

// reread reads r's row again (see MarkStale): false when it is gone.
func (t *Table) reread(ctx context.Context, q lockproto.Querier, db *sql.DB, r Row) (Row, bool, error) {
	if db == nil {
		return t.row(ctx, q, r.Namespace, r.Job, r.Slot)
	}
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted, ReadOnly: true})
	if err != nil {
		return Row{}, false, t.wrap("read a run again", err)
	}
	defer func() { _ = tx.Rollback() }()
	return t.row(ctx, tx, r.Namespace, r.Job, r.Slot)
}

// row reads the row (ns, job, slot): false when there is none.
func (t *Table) row(ctx context.Context, q lockproto.Querier, ns, job string, slot time.Time) (Row, bool, error) {
	r, err := t.scanRow(q.QueryRowContext(ctx, t.sql.rowSQL(t), ns, job, t.slotArg(slot)).Scan)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return Row{}, false, nil
	case err != nil:
		return Row{}, false, t.wrap("read a run again", err)
	}
	return r, true, nil
}
