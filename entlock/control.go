package entlock

import (
	"context"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/verbs"
)

// Act carries out an operator's action and records it in the actions log;
// x is the client or the *Driver (see gormlock.Act and
// docs/OPERATIONS.md).
func Act[T TxLike](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, a ormlock.Action, opts ...ormlock.Option) (ormlock.ActionRecord, error) {
	return verbs.Act(ctx, binder[T]{x}, pkg, a, opts)
}

// Controls reads every job's row of the controls table (see
// gormlock.Controls); x is the client or the *Driver.
func Controls[T TxLike](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, opts ...ormlock.Option) ([]ormlock.JobControl, error) {
	return verbs.Controls(ctx, binder[T]{x}, pkg, opts)
}

// Actions reads the last limit entries of the actions log for job, newest
// first (see gormlock.Actions); x is the client or the *Driver.
func Actions[T TxLike](ctx context.Context, x interface {
	Tx(context.Context) (T, error)
}, job string, limit int, opts ...ormlock.Option) ([]ormlock.ActionRecord, error) {
	return verbs.Actions(ctx, binder[T]{x}, pkg, job, limit, opts)
}
