package lockproto

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/status"
)

// Rate limits (keys.Rate, ormlock.Rate) as a Mechanism: a Transaction's
// "lock" is a token row of the rate table (ratetable.go), taken as the
// first statement of fn's own transaction by a locking read that skips the
// rows other transactions hold (FOR UPDATE SKIP LOCKED) and marked used
// until now + per by the server's clock; the transaction's COMMIT keeps
// the mark, its ROLLBACK gives the token back. Nothing is held between
// holders: each locks its own row, and a taken one is skipped, never
// waited for.
//
// Why a sliding window of n token rows (each token usable once per per)
// rather than fixed windows: it is as simple to prove, has no burst of 2n
// across a window's edge, and keeps n rows per key for ever (no rows per
// window, so nothing accumulates as windows pass). The proof, by the
// server's clock: two takes of one token that are not rolled back are
// serialized by the row's lock, and the later one saw the earlier one's
// committed mark free_at = t1 + per <= t2; so in any interval of length
// per each token is taken at most once by committed or open
// transactions, at most n in all.
//
// The take (BeginLocked):
//
//  1. pin a connection, BEGIN (fn's transaction, with the caller's
//     options), take (pgRate.take: one statement; myRate.take: two);
//  2. a token: the transaction is handed to fn (LockedTx), its end ends
//     the use;
//  3. none, and the key has fewer than n rows (first use, or after
//     Prune): ROLLBACK, insert the missing rows in a statement of their
//     own (autocommit), and go to 1 once more;
//  4. none: ROLLBACK; try-once returns ErrNotAcquired wrapping
//     errs.RateRefused (when a token is next due); a wait sleeps until
//     that time, or with the semaphore's backoff while tokens are held
//     by open transactions, and goes to 1 while its budget lasts.
type rateTokens struct{}

var rateMech rateTokens

func (rateTokens) Name() string       { return "rate limit tokens (FOR UPDATE SKIP LOCKED)" }
func (rateTokens) SharedMode() bool   { return false }
func (rateTokens) ServerWait() bool   { return false }
func (rateTokens) SessionLevel() bool { return false }
func (rateTokens) XactLevel() bool    { return true } // a token is its transaction's: a savepoint gives it back
func (rateTokens) OneMessage() bool   { return false }

// rateTarget is the target of a rate key: its row key in the rate table
// (keys.MySQL's form of the plain key in namespace ns, on every server).
func rateTarget(k keys.Key, ns string) Target {
	return Target{kind: kindRate, key: k, mech: rateMech, rkey: keys.MySQL(keys.Plain(k), ns)}
}

// errNotLock refuses what a rate limit never does (verbs refuse it first:
// shapeCombines).
func errNotLock(o *Op) error {
	return fmt.Errorf("%w: %s of %s: a Rate is the key of Transaction only", errs.ErrInvalidArgument, o.Verb, o.Key.String())
}

func (rateTokens) resolve(k keys.Key, ns string) lockItem {
	return lockItem{key: k, mysql: keys.MySQL(keys.Plain(k), ns)}
}
func (rateTokens) compare(a, b lockItem) int {
	switch {
	case a.mysql < b.mysql:
		return -1
	case a.mysql > b.mysql:
		return 1
	}
	return 0
}
func (rateTokens) serverName(it lockItem) string { return "rate key " + it.mysql }
func (rateTokens) local(it lockItem) localLock   { return localLock{key: "rate:" + it.mysql} }
func (rateTokens) hold(context.Context, *Op, *sql.DB, pinned) (*sessionHold, error) {
	return nil, errs.ErrInvalidArgument
}
func (rateTokens) openShared(_ context.Context, o *Op, _ *sharedConn) error { return errNotLock(o) }
func (rateTokens) tryKey(_ context.Context, o *Op, _ *sql.Conn) (bool, error) {
	return false, errNotLock(o)
}
func (rateTokens) unlockKey(_ context.Context, o *Op, _ Querier) error { return errNotLock(o) }
func (rateTokens) tryItem(context.Context, Querier, lockItem, *slotProbe) (bool, error) {
	return false, errs.ErrInvalidArgument
}
func (rateTokens) unlockItem(context.Context, Querier, lockItem) error { return nil }
func (rateTokens) sharedToken(_ context.Context, o *Op, _ *sql.DB, _ *sharedConn) error {
	return errNotLock(o)
}

// beginLocked takes a token of o's rate key in fn's transaction (the steps
// above).
func (rateTokens) beginLocked(ctx context.Context, o *Op, db *sql.DB, opts *sql.TxOptions) (*LockedTx, error) {
	db = sqlDB(o, db)
	t, err := NewRateTable(o.Dialect, o.Cfg.RateTable)
	if err != nil {
		return nil, err
	}
	var lt *LockedTx
	err = rateLoop(ctx, o, t, db, func() (bool, rateTake, error) {
		var r rateTake
		var err error
		lt, r, err = rateMech.takeOnce(ctx, o, t, db, opts)
		return lt != nil, r, err
	})
	if err != nil {
		return nil, err
	}
	return lt, nil
}

// TakeRate takes a token of o's rate key in the caller's open transaction
// q (a Transaction nested in it: gormlock's inside db.Transaction), where
// it stays until that transaction ends: its COMMIT keeps the use, its
// ROLLBACK (or a ROLLBACK TO the savepoint the caller opened around fn)
// gives the token back. The key's rows are read first on db (one round
// trip more than a Transaction's own take), and the missing ones inserted
// there, in a statement of their own. Unlike a Transaction's own take, a take that
// meets a token marked after q's snapshot (PostgreSQL above READ
// COMMITTED) cannot begin again: it fails with the server's error.
func TakeRate(ctx context.Context, o *Op, q Querier, db *sql.DB) error {
	t, err := NewRateTable(o.Dialect, o.Cfg.RateTable)
	if err != nil {
		return err
	}
	n, per := keys.RateOf(o.Key)
	// the key's rows are made sure of first, on db: a take in q that found
	// them missing would leave q holding InnoDB's lock on the gap where
	// the INSERT goes (a ROLLBACK TO SAVEPOINT keeps it), and on
	// PostgreSQL above READ COMMITTED q's snapshot would not see them
	if r, err := t.sql.figures(ctx, t, db, o.target.rkey, n); err != nil {
		return o.Abandon(ctx, t.wrap("read the tokens of "+o.Key.String(), err))
	} else if r.rows < int64(n) {
		if err := t.sql.fill(ctx, t, db, o.target.rkey, n); err != nil {
			return o.Abandon(ctx, t.wrap("insert the token rows of "+o.Key.String(), err))
		}
	}
	return rateLoop(ctx, o, t, db, func() (bool, rateTake, error) {
		if err := ctx.Err(); err != nil {
			return false, rateTake{}, notAcquired(ctx, o, err)
		}
		r, err := t.sql.take(ctx, t, q, o.target.rkey, n, per)
		if err == nil && r.tok == 0 && r.rows < 0 {
			r, err = t.sql.figures(ctx, t, db, o.target.rkey, n)
		}
		if err != nil {
			return false, r, failed(ctx, o, t.wrap("take a token of "+o.Key.String(), err))
		}
		// rows missing again (a Prune meanwhile): a refusal, never an
		// INSERT that q's locks could keep waiting
		r.rows = max(r.rows, int64(n))
		return r.tok > 0, r, nil
	})
}

// rateLoop takes a token of o's rate key with take (one try: whether it
// took one, else what the refusal read; an error reported already),
// inserting the key's missing rows on db once per round, and waits for
// one as the wait allows (the steps above).
func rateLoop(ctx context.Context, o *Op, t *RateTable, db *sql.DB, take func() (bool, rateTake, error)) error {
	wait, bounded, err := attempt(ctx, o)
	if err != nil {
		return err
	}
	ph := o.phase(ctx, wait)
	pause := semRetryMin
	filled, again := false, 0
	for {
		ok, r, err := take()
		switch {
		case err != nil:
			return err
		case ok:
			return settle(ctx, o, true, bounded, nil)
		case r.again && again < rateAgain && ctx.Err() == nil:
			again++
			continue
		case r.again:
			return notAcquired(ctx, o, errs.Join(ctxErr(ctx), fmt.Errorf("the tokens free were marked after the transaction's snapshot %d times in a row (concurrent takes at REPEATABLE READ or SERIALIZABLE)", again)))
		case r.rows < int64(rateN(o)) && !filled:
			// missing rows: insert them on their own, then take again
			if err := t.sql.fill(ctx, t, db, o.target.rkey, rateN(o)); err != nil {
				return failed(ctx, o, t.wrap("insert the token rows of "+o.Key.String(), err))
			}
			filled = true
			continue
		}
		refusal := rateRefusal(o, r)
		left := time.Until(ph.end)
		if ph.end.IsZero() || left <= 0 {
			if bounded && !ph.end.IsZero() {
				return notAcquired(ctx, o, errs.Join(context.DeadlineExceeded, refusal))
			}
			return notAcquired(ctx, o, refusal)
		}
		sleep := pause
		if refusal.Open == 0 && refusal.After > 0 {
			sleep = refusal.After // nothing can free one sooner
		} else {
			pause = min(2*pause, semRetryMax)
			if refusal.After > 0 {
				sleep = min(sleep, refusal.After)
			}
		}
		if !sleepCtx(ctx, min(sleep, left)) {
			return notAcquired(ctx, o, errs.Join(ctxErr(ctx), refusal))
		}
		filled, again = false, 0
	}
}

// rateAgain bounds the takes begun again at once after a snapshot that
// could not lock a free token (takeOnce).
const rateAgain = 10

// rateN is the n of o's rate key.
func rateN(o *Op) int {
	n, _ := keys.RateOf(o.Key)
	return n
}

// rateRefusal is the cause of a refusal that read r.
func rateRefusal(o *Op, r rateTake) *errs.RateRefused {
	n, per := keys.RateOf(o.Key)
	ref := &errs.RateRefused{N: n, Open: int(r.open), Per: per}
	if r.due > 0 {
		ref.Due = time.UnixMicro(r.due).UTC()
		ref.After = time.Duration(r.due-r.now) * time.Microsecond
	}
	return ref
}

// takeOnce begins fn's transaction on a pinned connection and takes a
// token in it: the transaction holding it, or what the refusal read (the
// transaction rolled back and the connection given back). An error has
// been classified and reported (failed).
func (rateTokens) takeOnce(ctx context.Context, o *Op, t *RateTable, db *sql.DB, opts *sql.TxOptions) (*LockedTx, rateTake, error) {
	conn, err := pinXact(ctx, o, db)
	if err != nil {
		return nil, rateTake{}, err
	}
	tx, txCancel, err := beginOn(ctx, o, conn, opts)
	if err != nil {
		Destroy(conn)
		return nil, rateTake{}, err
	}
	n, per := keys.RateOf(o.Key)
	r, err := t.sql.take(ctx, t, tx, o.target.rkey, n, per)
	if err == nil && r.tok > 0 {
		return &LockedTx{Tx: tx, ctx: ctx, op: o, conn: conn, txCancel: txCancel}, r, nil
	}
	if rerr := withinGrace(ctx, txCancel, tx.Rollback); rerr != nil || err != nil {
		Destroy(conn)
	} else {
		_ = conn.Close()
	}
	switch {
	case err != nil && t.s.SerializationFailure(err):
		// PostgreSQL above READ COMMITTED: a token marked by a commit
		// after this transaction's snapshot cannot be locked; take again
		// in a new transaction, whose snapshot sees it
		return nil, rateTake{again: true}, nil
	case err != nil:
		return nil, r, failed(ctx, o, t.wrap("take a token of "+o.Key.String(), err))
	case r.rows < 0:
		if r, err = t.sql.figures(ctx, t, db, o.target.rkey, n); err != nil {
			return nil, r, failed(ctx, o, t.wrap("read the tokens of "+o.Key.String(), err))
		}
	}
	return nil, r, nil
}

// rateCombines refuses a rate key with a use or option it does not
// combine with: any verb but Transaction (h.Rate), fencing.
func rateCombines(verb string, h Holding, k keys.Key, cfg config.Config) error {
	switch {
	case !keys.IsRate(k):
		return nil
	case !h.Rate:
		return fmt.Errorf("%w: %s of %s: a Rate is the key of Transaction only (its token is taken in fn's transaction and given back by its rollback)", errs.ErrInvalidArgument, verb, k.String())
	case cfg.Fencing:
		return fmt.Errorf("%w: %s of %s: WithFencing does not combine with a Rate (it holds no lock to fence)", errs.ErrInvalidArgument, verb, k.String())
	}
	return nil
}

// ReadRateUsage reads o's rate key's tokens on q without locking any
// (status.RateUsage): the tokens used by committed transactions within
// the last per, by the server's clock, and when the first is free again.
// A token held by a transaction still open shows as it was before it
// (free, or used by an earlier commit): no server lists row locks cheaply.
func ReadRateUsage(ctx context.Context, q Querier, o *Op) (status.RateUsage, error) {
	t, err := NewRateTable(o.Dialect, o.Cfg.RateTable)
	if err != nil {
		return status.RateUsage{}, err
	}
	n, per := keys.RateOf(o.Key)
	r, err := t.sql.figures(ctx, t, q, o.target.rkey, n)
	if err != nil {
		return status.RateUsage{}, t.wrap("read the tokens of "+o.Key.String(), err)
	}
	used := int(r.rows - r.open) // a missing row is a token never used
	u := status.RateUsage{N: n, Per: per, Used: used, Free: n - used, Now: time.UnixMicro(r.now).UTC()}
	if r.due > 0 {
		u.NextFree = time.UnixMicro(r.due).UTC()
	}
	return u, nil
}
