package ledger

import (
	"context"
	"fmt"

	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/status"
)

// MaxControls bounds the rows Controls reads: the jobs of one namespace.
const MaxControls = 10000

// MaxActions bounds Actions' limit.
const MaxActions = 10000

// actionName is the log's name column of rec: the key's text for a
// resign, else the job.
func actionName(rec *status.ActionRecord) string {
	if rec.Kind == status.ActionResign {
		return rec.Key
	}
	return rec.Job
}

// setActionName sets a's Job or Key from the log's name column.
func setActionName(a *status.ActionRecord, name string) {
	if a.Kind == status.ActionResign {
		a.Key = name
		return
	}
	a.Job = name
}

// CheckActions checks Actions' job (any valid job name, or "" for every
// entry) and limit (1 to MaxActions).
func CheckActions(verb, job string, limit int) error {
	if job != "" {
		if err := ValidateJob(verb, job); err != nil {
			return err
		}
	}
	if limit < 1 || limit > MaxActions {
		return fmt.Errorf("%w: %s: limit must be in 1..%d, got %d", errs.ErrInvalidArgument, verb, MaxActions, limit)
	}
	return nil
}

// Controls reads the jobs' rows of the controls table in namespace ns, by
// job name (at most MaxControls).
func (c Ctl) Controls(ctx context.Context, q Querier, verb, ns string) ([]status.JobControl, error) {
	t := c.t
	if t.cq == "" {
		return nil, c.noControls(verb)
	}
	rows, err := q.QueryContext(ctx, t.ctl.controlsSQL(t), ns, MaxControls)
	if err != nil {
		return nil, c.wrapCtl("read the controls", err)
	}
	defer rows.Close()
	out := []status.JobControl{}
	for rows.Next() {
		var jc status.JobControl
		if err := t.ctl.scanControl(rows.Scan, &jc); err != nil {
			return nil, c.wrapCtl("read the controls", err)
		}
		out = append(out, jc)
	}
	if err := rows.Err(); err != nil {
		return nil, c.wrapCtl("read the controls", err)
	}
	return out, nil
}

// Actions reads the last limit entries of the actions log in namespace
// ns, of name (a job, or a leader's key text) or of every name when it is
// "", newest first.
func (c Ctl) Actions(ctx context.Context, q Querier, verb, ns, name string, limit int) ([]status.ActionRecord, error) {
	t := c.t
	if t.aq == "" {
		return nil, c.noControls(verb)
	}
	args := []any{ns, limit}
	if name != "" {
		args = []any{ns, name, limit}
	}
	rows, err := q.QueryContext(ctx, t.ctl.actionsSQL(t, name != ""), args...)
	if err != nil {
		return nil, c.wrapCtl("read the actions log", err)
	}
	defer rows.Close()
	out := []status.ActionRecord{}
	for rows.Next() {
		var a status.ActionRecord
		if err := t.ctl.scanAction(rows.Scan, &a); err != nil {
			return nil, c.wrapCtl("read the actions log", err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, c.wrapCtl("read the actions log", err)
	}
	return out, nil
}
