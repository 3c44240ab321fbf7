package sqllock

import (
	"context"
	"database/sql"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/verbs"
)

// Act carries out an operator's action on db and records it in the
// actions log (see gormlock.Act and docs/OPERATIONS.md).
func Act(ctx context.Context, db *sql.DB, a ormlock.Action, opts ...ormlock.Option) (ormlock.ActionRecord, error) {
	return verbs.Act(ctx, binder{db}, pkg, a, opts)
}

// Controls reads every job's row of the controls table (see
// gormlock.Controls).
func Controls(ctx context.Context, db *sql.DB, opts ...ormlock.Option) ([]ormlock.JobControl, error) {
	return verbs.Controls(ctx, binder{db}, pkg, opts)
}

// Actions reads the last limit entries of the actions log for job, newest
// first (see gormlock.Actions).
func Actions(ctx context.Context, db *sql.DB, job string, limit int, opts ...ormlock.Option) ([]ormlock.ActionRecord, error) {
	return verbs.Actions(ctx, binder{db}, pkg, job, limit, opts)
}
