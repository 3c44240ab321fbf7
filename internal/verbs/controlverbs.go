// The operators' verbs: Act, Controls, Actions (docs/OPERATIONS.md).

package verbs

import (
	"context"
	"fmt"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/status"
)

// Act carries out the operator's action a and records it in the actions
// log: the jobs' actions by ledger.Table.Act, each in one transaction of
// its own; a resign by ledger.Resign, told who holds the key now.
func Act[B Binder](ctx context.Context, b B, pkg string, a status.Action, opts []config.Option) (status.ActionRecord, error) {
	verb := pkg + ".Act"
	p, t, err := openControls(ctx, b, pkg, "Act", opts, Args{Err: checkAction(verb, a)})
	defer p.release()
	if err == nil {
		err = p.ownTx("Act", "an action commits its change and its log entry in a transaction of its own")
	}
	if err != nil {
		return status.ActionRecord{}, p.mend(err)
	}
	if a.Kind == status.ActionResign {
		rec, err := ledger.Resign(ctx, p.sqlDB(), t, verb, p.Cfg.Namespace, a, func(ctx context.Context) (lockproto.HolderInfo, error) {
			return Holder(ctx, b, pkg, a.Key, opts)
		})
		return rec, p.mend(err)
	}
	rec, err := ledger.CtlOf(t).Act(ctx, p.sqlDB(), verb, p.Cfg.Namespace, a)
	return rec, p.mend(err)
}

// checkAction checks a's arguments: a resign's author and key, the jobs'
// actions by ledger.CheckAction.
func checkAction(verb string, a status.Action) error {
	if a.Kind != status.ActionResign {
		return ledger.CheckAction(verb, a)
	}
	if err := ledger.CheckAuthor(verb, a); err != nil {
		return err
	}
	if err := a.Key.Validate(); err != nil {
		return fmt.Errorf("%w: %s: resign: %w", errs.ErrInvalidArgument, verb, err)
	}
	return nil
}

// Controls reads every job's row of the controls table in the namespace
// in effect.
func Controls[B Binder](ctx context.Context, b B, pkg string, opts []config.Option) ([]status.JobControl, error) {
	p, t, err := openControls(ctx, b, pkg, "Controls", opts, Args{})
	defer p.release()
	if err != nil {
		return nil, p.mend(err)
	}
	cs, err := ledger.CtlOf(t).Controls(ctx, p.reader(), pkg+".Controls", p.Cfg.Namespace)
	return cs, p.mend(err)
}

// Actions reads the last limit entries of the actions log of job (every
// job and leader when job is ""), newest first.
func Actions[B Binder](ctx context.Context, b B, pkg, job string, limit int, opts []config.Option) ([]status.ActionRecord, error) {
	p, t, err := openControls(ctx, b, pkg, "Actions", opts, Args{Err: ledger.CheckActions(pkg+".Actions", job, limit)})
	defer p.release()
	if err != nil {
		return nil, p.mend(err)
	}
	as, err := ledger.CtlOf(t).Actions(ctx, p.reader(), pkg+".Actions", p.Cfg.Namespace, job, limit)
	return as, p.mend(err)
}

// openControls is Open, then the ledger table and the server check (steps
// 7 and 8, as Runs'). On error the pool is released already unless it is
// returned with the error of the later steps.
func openControls[B Binder](ctx context.Context, b B, pkg, verb string, opts []config.Option, a Args) (Pool, *ledger.Table, error) {
	p, err := Open(ctx, b, pkg, verb, opts, a)
	if err != nil {
		return Pool{}, nil, err
	}
	t, err := ledger.NewTable(p.Dialect, p.Cfg.LedgerTable)
	if err == nil {
		err = p.CheckPool(ctx)
	}
	return p, t, err
}
