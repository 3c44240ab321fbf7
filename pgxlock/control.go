package pgxlock

import (
	"context"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/verbs"
)

// Act carries out an operator's action on pool and records it in the
// actions log (see gormlock.Act and docs/OPERATIONS.md).
func Act(ctx context.Context, pool *pgxpool.Pool, a ormlock.Action, opts ...ormlock.Option) (ormlock.ActionRecord, error) {
	return verbs.Act(ctx, binder{pool}, pkg, a, opts)
}

// Controls reads every job's row of the controls table (see
// gormlock.Controls).
func Controls(ctx context.Context, pool *pgxpool.Pool, opts ...ormlock.Option) ([]ormlock.JobControl, error) {
	return verbs.Controls(ctx, binder{pool}, pkg, opts)
}

// Actions reads the last limit entries of the actions log for job, newest
// first (see gormlock.Actions).
func Actions(ctx context.Context, pool *pgxpool.Pool, job string, limit int, opts ...ormlock.Option) ([]ormlock.ActionRecord, error) {
	return verbs.Actions(ctx, binder{pool}, pkg, job, limit, opts)
}
