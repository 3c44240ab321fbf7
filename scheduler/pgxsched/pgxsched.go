// Package pgxsched is the pgx backend of the scheduler adapters, on pgx's
// own pool (PostgreSQL only, directly or behind PgBouncer in transaction
// mode): pass [Backend] to scheduler.NewLocker, scheduler.NewElector or
// scheduler.JobWrapper. It is a package of its own so that a pgx program
// links no ORM and no database/sql driver but pgx's (see the scheduler
// package's Decisions).
//
//	locker, err := scheduler.NewLocker(pgxsched.Backend(pool, ormlock.WithOwner(hostname)), midnight)
package pgxsched

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/pgxlock"
	"github.com/ormlock/ormlock/schedhook"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/internal/backend"
)

// Backend returns the scheduler Backend on pool: runs go through
// [pgxlock.RunScheduled] in claim mode, leadership through
// [pgxlock.Session], with opts (set [ormlock.WithOwner] to the replica's
// name, [ormlock.WithCatchUp] to catch up missed slots). A job runs outside
// any transaction: no connection is held idle in a transaction while it
// runs; each run holds one of the pool's connections for the lock. The
// ledger rows and lock keys are the other backends', so replicas on any of
// them share the runs. An invalid option or a nil pool is reported by the
// constructor that takes the Backend; create the ledger table with
// [pgxlock.Migrate]. See docs/SCHEDULES.md (Backends).
func Backend(pool *pgxpool.Pool, opts ...ormlock.Option) scheduler.Backend {
	if pool == nil {
		return backend.Failed(fmt.Errorf("%w: pgxsched.Backend: nil *pgxpool.Pool", ormlock.ErrInvalidArgument))
	}
	return backend.New(opts, backend.Funcs{
		Scheduled: func(ctx context.Context, job string, s ormlock.Schedule, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
			return pgxlock.RunScheduled(ctx, pool, job, s, func(ctx context.Context, _ pgx.Tx) error {
				return fn(ctx) // ctx carries the slot
			}, append(opts, schedhook.ClaimNoTx())...)
		},
		Session: func(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
			return pgxlock.Session(ctx, pool, key, fn, opts...)
		},
		Lead: func(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
			return pgxlock.Lead(ctx, pool, key, fn, opts...)
		},
		Prune: func(ctx context.Context, olderThan time.Duration, opts ...ormlock.Option) (int64, error) {
			return pgxlock.Prune(ctx, pool, olderThan, opts...)
		},
	})
}
