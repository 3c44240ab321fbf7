package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
)

// Run is one RunOnce call: a validated (job, slot), the ledger table and the
// lock Op (made with keys.RunKey(job, slot)) whose settings and observer
// it uses.
type Run struct {
	op    *lockproto.Op
	t     *Table
	ns    string
	job   string
	slot  time.Time
	owner string
	ctl   bool // the ledger's controls table exists: the claim reads the pause flag
}

// NewRun checks job and slot (verb names the caller in errors) and the
// ledger settings of op.Cfg: the table name, the namespace (part of the
// row's identity, as it is of the lock's) and the owner, which defaults to
// DefaultOwner. controls, when set, says whether the table's controls
// table exists (Table.ControlsOn), so that the claim reads the job's pause
// flag (pause.go).
func NewRun(verb string, op *lockproto.Op, job string, slot time.Time, controls func(t *Table) bool) (*Run, error) {
	if err := ValidateJob(verb, job); err != nil {
		return nil, err
	}
	if err := ValidateSlot(verb, slot); err != nil {
		return nil, err
	}
	t, err := NewTable(op.Dialect, op.Cfg.LedgerTable)
	if err != nil {
		return nil, err
	}
	op.Job = job // events carry the job: a bounded label, unlike the key
	lockproto.SetFenceID(op, lockproto.JobFenceID(job))
	owner := op.Cfg.Owner
	if owner == "" {
		owner = DefaultOwner()
	}
	r := &Run{op: op, t: t, ns: op.Cfg.Namespace, job: job, slot: keys.NormalizeSlot(slot), owner: owner}
	r.ctl = controls != nil && controls(t)
	if !op.Cfg.Claim {
		// the claim travels with the lock where it can (InTx)
		if claim := t.sql.claimText(t, r.ns, job, r.slot, owner, r.ctl); claim != "" {
			op.SetThen(claim)
		}
	}
	return r, nil
}

// Slot is the normalized slot (UTC, whole microseconds).
func (r *Run) Slot() time.Time { return r.slot }

// alreadyDone is the error of a slot done or skipped (an operator's skip,
// or a paused job's earlier firing: it never runs).
func (r *Run) alreadyDone(ctx context.Context) error {
	r.op.Emit(ctx, config.EventAlreadyDone, nil)
	if r.ns != "" {
		return fmt.Errorf("%w (or skipped): job %q in namespace %q, slot %s", errs.ErrAlreadyDone, r.job, r.ns, r.slot.Format(time.RFC3339Nano))
	}
	return fmt.Errorf("%w (or skipped): job %q, slot %s", errs.ErrAlreadyDone, r.job, r.slot.Format(time.RFC3339Nano))
}

// InTx is the body of the transactional mode. The caller has opened a
// transaction q and taken the (job, slot) lock in it (PostgreSQL xact lock,
// or MySQL GET_LOCK on the connection the transaction runs on); InTx claims
// the slot, runs fn in the same transaction and marks the row done. The
// caller commits when InTx returns nil and rolls back otherwise, so a failed
// fn leaves no row.
//
// It returns an error wrapping errs.ErrAlreadyDone (fn not called) when
// the slot is done or skipped, errClaimPaused (fn not called; the caller
// ends the transaction and calls Settle) when the job is paused, and fn's
// error unchanged when fn fails.
func (r *Run) InTx(ctx context.Context, q lockproto.Querier, fn func() error) error {
	started, ok, err := r.claimIn(ctx, q)
	if err != nil {
		if errors.Is(err, errClaimPaused) {
			return err
		}
		if r.t.s.SerializationFailure(err) {
			return fmt.Errorf("ormlock: job %q, slot %s: another instance ran this slot while this call waited for the lock, "+
				"and the transaction's snapshot (REPEATABLE READ or SERIALIZABLE, taken before the wait) cannot see its outcome; "+
				"call again (ErrAlreadyDone if that run succeeded), or use READ COMMITTED: %w",
				r.job, r.slot.Format(time.RFC3339Nano), err)
		}
		return err
	}
	if !ok {
		return r.alreadyDone(ctx)
	}
	if err := fn(); err != nil {
		if r.op.MySQLImplicitCommit(ctx, q) {
			// fn committed the claim behind the transaction's back (a
			// DDL statement): the rollback will not remove the
			// 'running' row, so it is marked failed (autocommitted)
			ierr := errs.Mark(lockproto.ErrImplicitCommit, nil, "job %q, slot %s", r.job, r.slot.Format(time.RFC3339Nano))
			if ferr := r.t.finish(context.WithoutCancel(ctx), q, r.ns, r.job, r.slot, r.owner, started, StatusFailed, ierr.Error()+": "+err.Error()); ferr != nil {
				ierr = errs.Join(ierr, ferr)
			}
			return errs.Join(ierr, err)
		}
		return err
	}
	if _, sent, _ := r.op.ThenRows(); sent {
		return r.doneIn(ctx, q)
	}
	return r.t.finish(ctx, q, r.ns, r.job, r.slot, r.owner, started, StatusDone, "")
}

// claimIn is the claim of the transactional mode: made already when it
// travelled with the lock (lockproto.Op.SetThen, by NewRun), whose rows
// say whether it claimed; otherwise a statement of its own in q.
func (r *Run) claimIn(ctx context.Context, q lockproto.Querier) (time.Time, bool, error) {
	if n, sent, err := r.op.ThenRows(); sent && err != nil {
		if r.ctl && r.t.ctl.pausedErr(err) {
			return time.Time{}, false, errClaimPaused
		}
		return time.Time{}, false, r.t.wrap("claim", err)
	} else if sent {
		return time.Time{}, n == 1, nil
	}
	return r.t.claim(ctx, q, r.ns, r.job, r.slot, r.owner, r.ctl)
}

// doneIn marks done the claim that travelled with the lock: in the message
// that commits q (lockproto.CommitWith), or as a statement of its own.
func (r *Run) doneIn(ctx context.Context, q lockproto.Querier) error {
	done := r.t.sql.doneText(r.t, r.ns, r.job, r.slot, r.owner)
	if lockproto.CommitWith(r.op, q, done) {
		return nil
	}
	res, err := q.ExecContext(ctx, done)
	if err != nil {
		return r.t.wrap("mark done", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("%w: ledger table %q: the claim of %q at %s by %q was no longer there to be marked done (%d rows, %v)",
			errs.ErrLockLost, r.t.name, r.job, r.slot.Format(time.RFC3339Nano), r.owner, n, err)
	}
	return nil
}

// Claimed is the claim mode: it holds the (job, slot) lock with
// (*lockproto.Op).Session on a connection pinned from db for the whole run,
// commits a 'running' row (taking over a failed one, or one left running by
// a dead owner), runs fn with the Session's context (cancelled with cause
// errs.ErrLockLost if the lock is lost) and then marks the row 'done' or
// 'failed' with fn's error text (a panic is recorded as failed and
// re-raised). The ledger statements run on db outside any transaction; the
// final one runs detached from fn's context so that it is written after a
// cancellation too.
//
// If the lock is lost while fn runs, the error wraps errs.ErrLockLost. The
// row is then marked failed when fn failed; when fn returned nil its work is
// done and the row is marked done, since no other instance can have claimed
// the slot as long as the row is still this run's 'running' claim (the
// finishing UPDATE matches only that). If another instance did take it over,
// the row is left to it.
func (r *Run) Claimed(ctx context.Context, db *sql.DB, fn func(ctx context.Context) error) error {
	return r.op.Session(ctx, db, func(lctx context.Context) error {
		// The claim runs on a connection of its own: failing to get one
		// (an exhausted pool) writes nothing, and needs no clean-up.
		conn, err := db.Conn(lctx)
		if err != nil {
			return r.t.wrap("claim", err)
		}
		// The claim's statements are let finish when lctx ends under
		// way (cut 1 s later): one cut there closes its connection while
		// the server may still run it, and a claim written after this
		// call gave up, released the lock and returned would take over
		// the row of the slot's next run, even this replica's.
		cctx, cdone := lockproto.GraceCtx(lctx)
		started, ok, err := r.t.claim(cctx, conn, r.ns, r.job, r.slot, r.owner, r.ctl)
		err = r.done(cctx, conn, err)
		cdone()
		if errors.Is(err, errClaimPaused) {
			// recorded while the lock is held
			return r.Settle(ctx, db, nil, err)
		}
		if err != nil {
			return r.claimFailed(ctx, lctx, db, err)
		}
		if !ok {
			return r.alreadyDone(lctx)
		}
		return r.runClaimed(ctx, lctx, db, started, fn)
	})
}

// abandonTimeout bounds marking an interrupted claim failed: milliseconds on
// a healthy server; on a frozen one the call must not outlive its context by
// much (the row is then left 'running', and the next claim takes it over).
const abandonTimeout = time.Second

// claimFailed handles a claim statement that failed: it may still have been
// written (the answer lost, or the context ending between the write and its
// read-back on MySQL), which would leave a 'running' row nobody runs. While
// the (job, slot) lock is held no live run can own a 'running' row, so this
// run's own is marked failed, detached from ctx; a later call takes it over.
// When the lock was lost, or the table or column is missing, it does nothing.
func (r *Run) claimFailed(ctx, lctx context.Context, db *sql.DB, err error) error {
	if r.t.s.MissingTable(err) || r.t.s.MissingColumn(err) || errors.Is(context.Cause(lctx), errs.ErrLockLost) {
		return err
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonTimeout)
	defer cancel()
	if aerr := r.autocommitted(fctx, db, func(q lockproto.Querier) error {
		return r.t.abandon(fctx, q, r.ns, r.job, r.slot, r.owner, "the claim failed: "+err.Error())
	}); aerr != nil {
		return errs.Join(err, aerr)
	}
	return err
}

func (r *Run) runClaimed(ctx, lctx context.Context, db *sql.DB, started time.Time, fn func(ctx context.Context) error) (err error) {
	panicked := true
	defer func() {
		if !panicked {
			return
		}
		p := recover()
		if p == nil { // runtime.Goexit (t.FailNow, say): record it, let it go on
			_ = r.finishDetached(ctx, db, started, StatusFailed, "fn exited the goroutine (runtime.Goexit)")
			return
		}
		_ = r.finishDetached(ctx, db, started, StatusFailed, fmt.Sprintf("panic: %v", p))
		panic(p)
	}()
	ferr := fn(lctx)
	panicked = false
	status, text := StatusDone, ""
	if ferr != nil {
		status, text = StatusFailed, ferr.Error()
		if cause := context.Cause(lctx); errors.Is(cause, errs.ErrLockLost) && !errors.Is(ferr, errs.ErrLockLost) {
			text = cause.Error() + ": " + text
		}
	}
	if werr := r.finishDetached(ctx, db, started, status, text); werr != nil {
		if ferr != nil {
			return errs.Join(ferr, werr)
		}
		return werr
	}
	return ferr
}

func (r *Run) finishDetached(ctx context.Context, db *sql.DB, started time.Time, status, text string) error {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	return r.autocommitted(fctx, db, func(q lockproto.Querier) error {
		return r.t.finish(fctx, q, r.ns, r.job, r.slot, r.owner, started, status, text)
	})
}

// autocommitted runs the claim mode's ledger statement f on db, committed
// when f returns: as it is where the session autocommits; on a connection
// pinned for it and followed by COMMIT where it does not (MySQL/MariaDB
// with autocommit 0, which GET_LOCK's statement read: see
// lockproto.AutocommitOff), so that the row is never left
// uncommitted on a connection back in the pool.
func (r *Run) autocommitted(ctx context.Context, db *sql.DB, f func(q lockproto.Querier) error) error {
	if !lockproto.AutocommitOff(r.op) {
		return f(db)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return r.t.wrap("pin a connection", err)
	}
	return r.done(ctx, conn, f(conn))
}

// done ends the use of conn by a claim-mode ledger statement that
// returned err: where the session does not autocommit, COMMIT (the
// connection is destroyed when that or the statement failed, so that no
// transaction goes back to the pool); then conn goes back to the pool.
func (r *Run) done(ctx context.Context, conn *sql.Conn, err error) error {
	if !lockproto.AutocommitOff(r.op) {
		_ = conn.Close()
		return err
	}
	if err == nil {
		if _, cerr := conn.ExecContext(ctx, "COMMIT AND NO CHAIN NO RELEASE"); cerr != nil {
			err = r.t.wrap("COMMIT (autocommit is off)", cerr)
		}
	}
	if err != nil {
		lockproto.Destroy(conn)
		return err
	}
	_ = conn.Close()
	return nil
}
