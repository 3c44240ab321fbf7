package scheduler

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
)

// Backend is the database side of the adapters: the database that holds the
// locks and the RunOnce ledger, and the ORM adapter through which it is
// reached. Build it with [GORM] (or [Ent]); the zero Backend is not usable,
// and the constructors reject it.
//
// A Backend is a small value that may be copied and shared; every
// scheduler instance (every replica) builds its own on its own pool.
type Backend struct {
	err error
	// runOnce runs fn at most once per (job, slot), in RunOnce's claim
	// mode: fn runs outside any transaction with a context that is
	// cancelled with cause ormlock.ErrLockLost if the lock is lost.
	runOnce func(ctx context.Context, job string, slot time.Time, fn func(ctx context.Context) error) error
	// session holds the lock named key for as long as fn runs; extra
	// options (a wait) apply on top of the Backend's.
	session func(ctx context.Context, key string, fn func(ctx context.Context) error, extra ...ormlock.Option) error
	// prune deletes the finished ledger rows older than olderThan.
	prune func(ctx context.Context, olderThan time.Duration) (int64, error)
}

func (b Backend) check(verb string) error {
	switch {
	case b.err != nil:
		return b.err
	case b.runOnce == nil || b.session == nil || b.prune == nil:
		return fmt.Errorf("%w: %s: zero Backend (build one with scheduler.GORM or scheduler.Ent)", ormlock.ErrInvalidArgument, verb)
	}
	return nil
}

// GORM returns the Backend on db: runs go through [gormlock.RunOnce] in claim
// mode ([ormlock.WithClaim], added to opts) and leadership through
// [gormlock.Session]; opts apply on top of the gormlock plugin's defaults
// (set [ormlock.WithOwner] to the replica's name). db must not be inside a
// transaction; each run holds two of its connections. An invalid option or a
// nil db is reported by the constructor that takes the Backend. See
// docs/SCHEDULES.md (Backends: GORM and Ent).
func GORM(db *gorm.DB, opts ...ormlock.Option) Backend {
	const name = "scheduler.GORM"
	if db == nil {
		return Backend{err: fmt.Errorf("%w: %s: nil *gorm.DB", ormlock.ErrInvalidArgument, name)}
	}
	if err := checkOptions(opts); err != nil {
		return Backend{err: err}
	}
	runOpts := append(opts[:len(opts):len(opts)], ormlock.WithClaim())
	return Backend{
		runOnce: func(ctx context.Context, job string, slot time.Time, fn func(ctx context.Context) error) error {
			return gormlock.RunOnce(db.WithContext(ctx), job, slot, func(tx *gorm.DB) error {
				// Claim mode: tx is the plain db bound to the lock
				// session's context.
				return fn(tx.Statement.Context)
			}, runOpts...)
		},
		session: func(ctx context.Context, key string, fn func(ctx context.Context) error, extra ...ormlock.Option) error {
			return gormlock.Session(db.WithContext(ctx), key, fn, append(opts[:len(opts):len(opts)], extra...)...)
		},
		prune: func(ctx context.Context, olderThan time.Duration) (int64, error) {
			return gormlock.Prune(db.WithContext(ctx), olderThan, opts...)
		},
	}
}

// checkOptions returns the error of an invalid option, for either backend:
// the GORM plugin's defaults are built exactly as every verb builds its
// options, so its error is the one the verbs would return.
func checkOptions(opts []ormlock.Option) error { return gormlock.New(opts...).Err() }
