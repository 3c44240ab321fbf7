// Package gormsched is the GORM backend of the scheduler adapters: pass
// [Backend] to scheduler.NewLocker, scheduler.NewElector or
// scheduler.JobWrapper. It is a package of its own so that a GORM program
// links no ent (see the scheduler package's Decisions).
//
//	locker, err := scheduler.NewLocker(gormsched.Backend(db, ormlock.WithOwner(hostname)), midnight)
package gormsched

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/internal/backend"
)

// Backend returns the scheduler Backend on db: runs go through
// [gormlock.RunScheduled] in claim mode ([ormlock.WithClaim], added to opts)
// and leadership through [gormlock.Lead]; opts apply on top of the
// gormlock plugin's defaults (set [ormlock.WithOwner] to the replica's
// name, [ormlock.WithCatchUp] to catch up missed slots). db must not be
// inside a transaction; each run holds two of its connections. An invalid
// option or a nil db is reported by the constructor that takes the
// Backend. See docs/SCHEDULES.md (Backends).
func Backend(db *gorm.DB, opts ...ormlock.Option) scheduler.Backend {
	const name = "gormsched.Backend"
	if db == nil {
		return backend.Failed(fmt.Errorf("%w: %s: nil *gorm.DB", ormlock.ErrInvalidArgument, name))
	}
	return backend.New(opts, backend.Funcs{
		Scheduled: func(ctx context.Context, job string, s ormlock.Schedule, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
			return gormlock.RunScheduled(db.WithContext(ctx), job, s, func(tx *gorm.DB) error {
				// Claim mode: tx is the plain db bound to the lock
				// session's context, which carries the slot.
				return fn(tx.Statement.Context)
			}, opts...)
		},
		Session: func(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
			return gormlock.Session(db.WithContext(ctx), key, fn, opts...)
		},
		Lead: func(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
			return gormlock.Lead(db.WithContext(ctx), key, fn, opts...)
		},
		Prune: func(ctx context.Context, olderThan time.Duration, opts ...ormlock.Option) (int64, error) {
			return gormlock.Prune(db.WithContext(ctx), olderThan, opts...)
		},
	})
}
