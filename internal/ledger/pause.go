package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/lockproto"
)

// A paused job's slot (docs/OPERATIONS.md). The claim reads the job's
// pause flag in its own statement (claim.go); for a slot it would take of
// a paused job it answers errClaimPaused, fn is not called, and the slot
// is recorded 'skipped' with the pause's "paused by AUTHOR: REASON" by a
// statement of its own (Settle): in claim mode while the run's lock is
// held; in the transactional mode after fn's transaction, which the
// claim's failure rolls back, is over (in the caller's transaction when
// RunOnce is called inside one). That statement writes only a slot that
// has no row or a 'failed' one, and only while the job is still paused,
// so that it never overwrites a run that another replica made once the
// job was resumed, nor a pending 'rerun'. The verb returns an error
// wrapping errs.ErrPaused, and the observer gets an EventAlreadyDone whose
// Err wraps it.

// errClaimPaused is a claim's answer for a slot of a paused job.
var errClaimPaused = errors.New("ormlock: the claim found the job paused")

// Settle finishes a RunOnce whose claim found the job paused (err wraps
// errClaimPaused; any other err is returned as it is): it records the slot
// 'skipped' in tx when set (the caller's transaction), else in a
// transaction of its own on db, and returns the error wrapping
// errs.ErrPaused. A failure to record is joined to it.
func (r *Run) Settle(ctx context.Context, db *sql.DB, tx lockproto.Querier, err error) error {
	if !errors.Is(err, errClaimPaused) {
		return err
	}
	gctx, done := lockproto.GraceCtx(ctx)
	defer done()
	var reason string
	var rerr error
	if tx != nil {
		reason, rerr = r.recordPaused(gctx, tx)
	} else if db != nil {
		rerr = inTx(gctx, db, func(q *sql.Tx) error {
			var err error
			reason, err = r.recordPaused(gctx, q)
			return err
		})
	}
	perr := r.pausedErr(reason)
	r.op.Emit(ctx, config.EventAlreadyDone, perr)
	if rerr != nil {
		return errs.Join(perr, rerr)
	}
	return perr
}

// recordPaused records the slot 'skipped' while the job is paused, and
// returns the pause's reason text ("" when it was resumed meanwhile).
func (r *Run) recordPaused(ctx context.Context, q lockproto.Querier) (string, error) {
	c, err := CtlOf(r.t).readControl(ctx, q, r.ns, r.job, false)
	if err != nil || !c.paused {
		return "", err
	}
	reason := Reason("paused", c.author, c.reason)
	if err := r.t.ctl.markSlot(ctx, r.t, q, r.ns, r.job, r.slot, StatusSkipped, r.owner, reason, pausedFrom); err != nil {
		return reason, r.t.wrap("record the paused job's slot skipped", err)
	}
	return reason, nil
}

func (r *Run) pausedErr(reason string) error {
	if reason == "" {
		reason = "paused when its slot was claimed"
	}
	if r.ns != "" {
		return fmt.Errorf("%w: job %q in namespace %q, slot %s: %s", errs.ErrPaused, r.job, r.ns, r.slot.Format(time.RFC3339Nano), reason)
	}
	return fmt.Errorf("%w: job %q, slot %s: %s", errs.ErrPaused, r.job, r.slot.Format(time.RFC3339Nano), reason)
}

// inTx runs f in a transaction of its own on db, committed when f returns
// nil (whatever the session's autocommit).
func inTx(ctx context.Context, db *sql.DB, f func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return errs.Wrap(err, "begin")
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
