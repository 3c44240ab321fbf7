package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/sched"
	"github.com/ormlock/ormlock/internal/status"
)

// The jobs' actions (docs/OPERATIONS.md): pause, resume, skip, rerun. Each
// runs in one transaction of its own with its entry in the actions log,
// and changes only ormlock's own tables (the controls table, the ledger,
// the log): no lock is taken or released, no backend ended.
//
//   - pause sets the job's paused flag (a no-op, logged "already paused",
//     when it is set); resume clears it ("already running" when clear).
//   - skip records the slot 'skipped' with "skipped by AUTHOR: REASON" in
//     its error column (inserting the row of a slot that has none); a
//     'skipped' slot is a no-op ("already skipped").
//   - rerun marks the slot 'rerun' (inserting the row of a missed slot),
//     keeping a failed run's error; a 'rerun' slot is a no-op ("already
//     rerun").
//   - skip and rerun of a slot 'running' or 'done' are refused
//     (ErrInvalidArgument naming the status), as is a slot that is not a
//     firing of the schedule a replica recorded for the job (RunScheduled,
//     schedule.go); with no schedule recorded, any whole-second slot.
//
// The slot's row is read FOR UPDATE, written, and read again in the same
// transaction: a run that committed its row meanwhile (a transactional
// RunOnce's row is not visible before its commit) leaves the write
// without effect, and the action is refused with the status it found.

// MaxAuthorLen bounds an action's Author, in characters; MaxReasonBytes
// its Reason.
const (
	MaxAuthorLen   = 255
	MaxReasonBytes = 4000
)

// The rows a skip, a rerun and a paused claim may change (markSlot's
// condition on the existing row r). A paused claim on MySQL/MariaDB writes
// its own row 'skipped' without a reason (mysql.go), which is completed.
const (
	skipFrom   = "r.status IN ('failed', 'rerun')"
	rerunFrom  = "r.status IN ('failed', 'skipped')"
	pausedFrom = "(r.status = 'failed' OR (r.status = 'skipped' AND r.error IS NULL))"
)

// CheckAction checks a (not a resign: ledger.Resign's) before anything is
// read: its kind, author and reason, its job, and its slot.
func CheckAction(verb string, a status.Action) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", errs.ErrInvalidArgument, verb, fmt.Sprintf(format, args...))
	}
	if err := CheckAuthor(verb, a); err != nil {
		return err
	}
	switch a.Kind {
	case status.ActionPause, status.ActionResume:
		if !a.Slot.IsZero() {
			return bad("%s takes no slot (got %s)", a.Kind, a.Slot.UTC().Format(time.RFC3339))
		}
		return ValidateJob(verb, a.Job)
	case status.ActionSkip, status.ActionRerun:
		if err := ValidateJob(verb, a.Job); err != nil {
			return err
		}
		return ValidateSlot(verb, a.Slot)
	case "":
		return bad("action without a kind (build it with ormlock.Pause, Resume, Skip, Rerun or Resign)")
	}
	return bad("unknown action %q", a.Kind)
}

// CheckAuthor checks an action's author (non-empty valid UTF-8 without
// NUL, at most MaxAuthorLen characters) and reason (valid UTF-8 without
// NUL, at most MaxReasonBytes bytes): every action's, a resign's too.
func CheckAuthor(verb string, a status.Action) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", errs.ErrInvalidArgument, verb, fmt.Sprintf(format, args...))
	}
	switch {
	case strings.TrimSpace(a.Author) == "":
		return bad("an action needs its author (Action.By(author, reason))")
	case !utf8.ValidString(a.Author) || strings.ContainsRune(a.Author, 0):
		return bad("author %q is not valid UTF-8 without NUL bytes", a.Author)
	case utf8.RuneCountInString(a.Author) > MaxAuthorLen:
		return bad("author is %d characters long, at most %d", utf8.RuneCountInString(a.Author), MaxAuthorLen)
	case !utf8.ValidString(a.Reason) || strings.ContainsRune(a.Reason, 0):
		return bad("reason %q is not valid UTF-8 without NUL bytes", a.Reason)
	case len(a.Reason) > MaxReasonBytes:
		return bad("reason is %d bytes long, at most %d", len(a.Reason), MaxReasonBytes)
	}
	return nil
}

// Act carries out a (checked by CheckAction) in namespace ns on db, in
// one transaction with its entry in the actions log, which it returns.
func (c Ctl) Act(ctx context.Context, db *sql.DB, verb, ns string, a status.Action) (status.ActionRecord, error) {
	t := c.t
	if t.cq == "" || t.aq == "" {
		return status.ActionRecord{}, c.noControls(verb)
	}
	rec := status.ActionRecord{Namespace: ns, Kind: a.Kind, Job: a.Job, Author: a.Author, Reason: a.Reason}
	if !a.Slot.IsZero() {
		rec.Slot = keys.NormalizeSlot(a.Slot)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return status.ActionRecord{}, c.wrapCtl("begin", err)
	}
	defer func() { _ = tx.Rollback() }()
	switch a.Kind {
	case status.ActionPause, status.ActionResume:
		rec.Outcome, err = c.setPause(ctx, tx, ns, a)
	default:
		rec.Outcome, err = c.markByAction(ctx, tx, verb, ns, a.Kind, rec.Slot, a)
	}
	if err != nil {
		return status.ActionRecord{}, err
	}
	if err := t.ctl.insertAction(ctx, t, tx, &rec); err != nil {
		return status.ActionRecord{}, c.wrapCtl("log the action", err)
	}
	if err := tx.Commit(); err != nil {
		return status.ActionRecord{}, c.wrapCtl("commit the action", err)
	}
	return rec, nil
}

// control is a job's row of the controls table, as act reads it.
type control struct {
	found                    bool
	paused                   bool
	schedule, author, reason string
}

// readControl reads the job's row of the controls table (FOR UPDATE when
// lock is set).
func (c Ctl) readControl(ctx context.Context, q lockproto.Querier, ns, job string, lock bool) (control, error) {
	t := c.t
	query := t.ctl.readControlSQL(t)
	if lock {
		query += " FOR UPDATE"
	}
	var row control
	err := q.QueryRowContext(ctx, query, ns, job).Scan(&row.paused, &row.schedule, &row.author, &row.reason)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return control{}, nil
	case err != nil:
		return control{}, c.wrapCtl("read the job's controls", err)
	}
	row.found = true
	return row, nil
}

// setPause pauses or resumes a.Job.
func (c Ctl) setPause(ctx context.Context, q lockproto.Querier, ns string, a status.Action) (string, error) {
	t := c.t
	row, err := c.readControl(ctx, q, ns, a.Job, true)
	if err != nil {
		return "", err
	}
	pause := a.Kind == status.ActionPause
	switch {
	case pause && row.paused:
		return "already paused (by " + row.author + ")", nil
	case !pause && !row.paused:
		return "already running (not paused)", nil
	}
	if err := t.ctl.setPaused(ctx, t, q, ns, a.Job, pause, a.Author, a.Reason); err != nil {
		return "", c.wrapCtl("set the pause flag", err)
	}
	if pause {
		return "paused", nil
	}
	return "resumed", nil
}

// markByAction skips or reruns a.Job's slot.
func (c Ctl) markByAction(ctx context.Context, q lockproto.Querier, verb, ns string, kind status.ActionKind, slot time.Time, a status.Action) (string, error) {
	t := c.t
	row, err := c.readControl(ctx, q, ns, a.Job, false)
	if err != nil {
		return "", err
	}
	if err := checkFiring(verb, a.Job, row.schedule, slot); err != nil {
		return "", err
	}
	before, err := c.slotStatus(ctx, q, ns, a.Job, slot, true)
	if err != nil {
		return "", err
	}
	target, from, errText := StatusRerun, rerunFrom, ""
	if kind == status.ActionSkip {
		target, from, errText = StatusSkipped, skipFrom, Reason("skipped", a.Author, a.Reason)
	}
	switch before {
	case StatusRunning, StatusDone:
		return "", refuseStatus(verb, kind, a.Job, slot, before)
	case target:
		return "already " + target, nil
	}
	if err := t.ctl.markSlot(ctx, t, q, ns, a.Job, slot, target, "", errText, from); err != nil {
		return "", t.wrap("mark the slot "+target, err)
	}
	if target == StatusRerun {
		// the firings' read of the reruns looks at the ledger only while
		// some are asked (schedule.go)
		if err := t.ctl.askRerun(ctx, t, q, ns, a.Job); err != nil {
			return "", c.wrapCtl("count the rerun asked", err)
		}
	}
	// a locking read: on MySQL/MariaDB a plain one would read the
	// transaction's snapshot, not a run committed since
	after, err := c.slotStatus(ctx, q, ns, a.Job, slot, true)
	if err != nil {
		return "", err
	}
	if after != target {
		return "", refuseStatus(verb, kind, a.Job, slot, after)
	}
	if before == "" {
		return "slot had no run (missed); now " + target, nil
	}
	return "slot was " + before + "; now " + target, nil
}

// slotStatus reads the status of the slot's ledger row, "" when it has
// none.
func (c Ctl) slotStatus(ctx context.Context, q lockproto.Querier, ns, job string, slot time.Time, lock bool) (string, error) {
	t := c.t
	query := t.ctl.slotStatusSQL(t)
	if lock {
		query += " FOR UPDATE"
	}
	var st string
	err := q.QueryRowContext(ctx, query, ns, job, t.slotArg(slot)).Scan(&st)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", nil
	case err != nil:
		return "", t.wrap("read the slot's status", err)
	}
	return st, nil
}

func refuseStatus(verb string, kind status.ActionKind, job string, slot time.Time, st string) error {
	return fmt.Errorf("%w: %s: %s of job %q, slot %s: the slot is %q (only a slot that is failed, skipped, rerun or has no run can be skipped or rerun)",
		errs.ErrInvalidArgument, verb, kind, job, slot.UTC().Format(time.RFC3339), st)
}

// checkFiring checks that slot is a firing of the schedule recorded for
// job (its String, schedule.go); with none, or one this version cannot
// read back, any slot passes.
func checkFiring(verb, job, recorded string, slot time.Time) error {
	if recorded == "" {
		return nil
	}
	s, err := sched.Parse(recorded)
	if err != nil {
		return nil
	}
	if got := s.Slot(slot); !got.Equal(slot) {
		return fmt.Errorf("%w: %s: slot %s is not a firing of job %q's schedule %q (the firing at or before it is %s)",
			errs.ErrInvalidArgument, verb, slot.UTC().Format(time.RFC3339), job, recorded, got.UTC().Format(time.RFC3339))
	}
	return nil
}

// Reason is the error text of a slot an action or a pause settled:
// "paused by alice: incident 42" ("paused by alice" without a reason).
func Reason(what, author, reason string) string {
	if reason == "" {
		return ErrorText(what + " by " + author)
	}
	return ErrorText(what + " by " + author + ": " + reason)
}
