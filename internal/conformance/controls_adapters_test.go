package conformance_test

import (
	"context"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/pgxlock"
	"github.com/ormlock/ormlock/sqllock"
)

// actor is what the operators' tests need of an adapter beside its
// runner: Act, Controls and Actions over the same pool.
type actor interface {
	runner
	Act(ctx context.Context, a ormlock.Action, opts ...ormlock.Option) (ormlock.ActionRecord, error)
	Controls(ctx context.Context, opts ...ormlock.Option) ([]ormlock.JobControl, error)
	Actions(ctx context.Context, job string, limit int, opts ...ormlock.Option) ([]ormlock.ActionRecord, error)
}

var (
	_ actor = gormLocker{}
	_ actor = entLocker{}
	_ actor = sqlLocker{}
	_ actor = pgxLocker{}
)

func (g gormLocker) Act(ctx context.Context, a ormlock.Action, opts ...ormlock.Option) (ormlock.ActionRecord, error) {
	return gormlock.Act(g.db.WithContext(ctx), a, opts...)
}

func (g gormLocker) Controls(ctx context.Context, opts ...ormlock.Option) ([]ormlock.JobControl, error) {
	return gormlock.Controls(g.db.WithContext(ctx), opts...)
}

func (g gormLocker) Actions(ctx context.Context, job string, limit int, opts ...ormlock.Option) ([]ormlock.ActionRecord, error) {
	return gormlock.Actions(g.db.WithContext(ctx), job, limit, opts...)
}

func (e entLocker) Act(ctx context.Context, a ormlock.Action, opts ...ormlock.Option) (ormlock.ActionRecord, error) {
	return entlock.Act(ctx, e.client, a, opts...)
}

func (e entLocker) Controls(ctx context.Context, opts ...ormlock.Option) ([]ormlock.JobControl, error) {
	return entlock.Controls(ctx, e.client, opts...)
}

func (e entLocker) Actions(ctx context.Context, job string, limit int, opts ...ormlock.Option) ([]ormlock.ActionRecord, error) {
	return entlock.Actions(ctx, e.client, job, limit, opts...)
}

func (s sqlLocker) Act(ctx context.Context, a ormlock.Action, opts ...ormlock.Option) (ormlock.ActionRecord, error) {
	return sqllock.Act(ctx, s.db, a, s.with(opts)...)
}

func (s sqlLocker) Controls(ctx context.Context, opts ...ormlock.Option) ([]ormlock.JobControl, error) {
	return sqllock.Controls(ctx, s.db, s.with(opts)...)
}

func (s sqlLocker) Actions(ctx context.Context, job string, limit int, opts ...ormlock.Option) ([]ormlock.ActionRecord, error) {
	return sqllock.Actions(ctx, s.db, job, limit, s.with(opts)...)
}

func (p pgxLocker) Act(ctx context.Context, a ormlock.Action, opts ...ormlock.Option) (ormlock.ActionRecord, error) {
	return pgxlock.Act(ctx, p.pools.pool(), a, p.with(opts)...)
}

func (p pgxLocker) Controls(ctx context.Context, opts ...ormlock.Option) ([]ormlock.JobControl, error) {
	return pgxlock.Controls(ctx, p.pools.pool(), p.with(opts)...)
}

func (p pgxLocker) Actions(ctx context.Context, job string, limit int, opts ...ormlock.Option) ([]ormlock.ActionRecord, error) {
	return pgxlock.Actions(ctx, p.pools.pool(), job, limit, p.with(opts)...)
}
