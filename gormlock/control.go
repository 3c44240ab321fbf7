package gormlock

import (
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/verbs"
)

// Act carries out an operator's action ([ormlock.Pause], [ormlock.Resume],
// [ormlock.Skip], [ormlock.Rerun], [ormlock.Resign], each with its By) in
// the namespace in effect, and records it in the actions log, returning
// the entry. It changes only ormlock's own tables, which [Migrate]
// creates; an action without an author, a slot that is not a firing of
// the schedule a replica recorded for the job, or a skip or rerun of a
// slot 'running' or 'done' is refused with an error wrapping
// [ormlock.ErrInvalidArgument] and changes nothing (and is not logged).
// db must not be inside a transaction: an action commits with its log
// entry in a transaction of its own. The context is GORM's (db.WithContext). See
// docs/OPERATIONS.md.
func Act(db *gorm.DB, a ormlock.Action, opts ...ormlock.Option) (ormlock.ActionRecord, error) {
	return verbs.Act(ctxOf(db), binder{db}, pkg, a, opts)
}

// Controls reads every job's row of the controls table in the namespace
// in effect: which jobs are paused, by whom and why, and the schedule a
// replica registered. See docs/OPERATIONS.md.
func Controls(db *gorm.DB, opts ...ormlock.Option) ([]ormlock.JobControl, error) {
	return verbs.Controls(ctxOf(db), binder{db}, pkg, opts)
}

// Actions reads the last limit entries of the actions log for job (every
// job's and leader's when job is ""), newest first. limit must be
// positive.
func Actions(db *gorm.DB, job string, limit int, opts ...ormlock.Option) ([]ormlock.ActionRecord, error) {
	return verbs.Actions(ctxOf(db), binder{db}, pkg, job, limit, opts)
}
