// The operators' verbs: Act, Controls, Actions (docs/OPERATIONS.md).

package verbs

import (
	"context"
	"fmt"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/status"
)

// Act carries out the operator's action a and records it in the actions
// log.
func Act[B Binder](ctx context.Context, b B, pkg string, a status.Action, opts []config.Option) (status.ActionRecord, error) {
	if a.Kind == status.ActionResign {
		return Resign(ctx, b, pkg, a, opts)
	}
	return status.ActionRecord{}, fmt.Errorf("%w: %s.Act: not built yet", errs.ErrInvalidArgument, pkg)
}

// Controls reads every job's row of the controls table in the namespace
// in effect.
func Controls[B Binder](ctx context.Context, b B, pkg string, opts []config.Option) ([]status.JobControl, error) {
	return nil, fmt.Errorf("%w: %s.Controls: not built yet", errs.ErrInvalidArgument, pkg)
}

// Actions reads the last limit entries of the actions log of job (every
// job and leader when job is ""), newest first.
func Actions[B Binder](ctx context.Context, b B, pkg, job string, limit int, opts []config.Option) ([]status.ActionRecord, error) {
	return nil, fmt.Errorf("%w: %s.Actions: not built yet", errs.ErrInvalidArgument, pkg)
}
