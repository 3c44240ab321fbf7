// Package sqlsched is the database/sql backend of the scheduler adapters
// (sqlc, sqlx, bun and plain database/sql programs): pass [Backend] to
// scheduler.NewLocker, scheduler.NewElector or scheduler.JobWrapper. It is
// a package of its own so that a database/sql program links no ORM (see
// the scheduler package's Decisions).
//
//	locker, err := scheduler.NewLocker(sqlsched.Backend(db, ormlock.WithOwner(hostname)), midnight)
package sqlsched

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/schedhook"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/internal/backend"
	"github.com/ormlock/ormlock/sqllock"
)

// Backend returns the scheduler Backend on db (PostgreSQL, directly or
// behind PgBouncer in transaction mode, or MySQL/MariaDB; the dialect comes
// from the driver, as for sqllock): runs go through [sqllock.RunScheduled]
// in claim mode, leadership through [sqllock.Session], with opts (set
// [ormlock.WithOwner] to the replica's name, [ormlock.WithCatchUp] to catch
// up missed slots). A job runs outside any transaction: no connection is
// held idle in a transaction while it runs; each run holds one connection
// for the lock. The ledger rows and lock keys are the other backends', so
// replicas on any of them share the runs. An invalid option or a nil db is
// reported by the constructor that takes the Backend; create the ledger
// table with [sqllock.Migrate]. See docs/SCHEDULES.md (Backends).
func Backend(db *sql.DB, opts ...ormlock.Option) scheduler.Backend {
	if db == nil {
		return backend.Failed(fmt.Errorf("%w: sqlsched.Backend: nil *sql.DB", ormlock.ErrInvalidArgument))
	}
	return backend.New(opts, backend.Funcs{
		Scheduled: func(ctx context.Context, job string, s ormlock.Schedule, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
			return sqllock.RunScheduled(ctx, db, job, s, func(ctx context.Context, _ *sql.Tx) error {
				return fn(ctx) // ctx carries the slot
			}, append(opts, schedhook.ClaimNoTx())...)
		},
		Session: func(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
			return sqllock.Session(ctx, db, key, fn, opts...)
		},
		Lead: func(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...ormlock.Option) error {
			return sqllock.Lead(ctx, db, key, fn, opts...)
		},
		Prune: func(ctx context.Context, olderThan time.Duration, opts ...ormlock.Option) (int64, error) {
			return sqllock.Prune(ctx, db, olderThan, opts...)
		},
	})
}
