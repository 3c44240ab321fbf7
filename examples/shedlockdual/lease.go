package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/scheduler"
)

// Lease is ShedLock's lock table, taken the way a ShedLock node with
// usingDbTime() takes it: one row per lock name, held until lock_until,
// in UTC by the database server's clock. ShedLock's documented table:
//
//	CREATE TABLE shedlock (name VARCHAR(64) NOT NULL PRIMARY KEY,
//		lock_until TIMESTAMP(3) NOT NULL, locked_at TIMESTAMP(3) NOT NULL,
//		locked_by VARCHAR(255) NOT NULL)
//
// (TIMESTAMP without a precision on PostgreSQL.)
type Lease struct {
	DB       *sql.DB
	Postgres bool          // PostgreSQL's SQL, else MySQL/MariaDB's
	Owner    string        // locked_by: unique per replica
	AtMost   time.Duration // lockAtMostFor: the lease of a run; must outlast the job
	AtLeast  time.Duration // lockAtLeastFor: the least a run keeps the lease
}

// q returns the statement of PostgreSQL or of MySQL/MariaDB. Both bind
// name, a duration in microseconds, then the owner where they take them.
func (l *Lease) q(postgres, mysql string) string {
	if l.Postgres {
		return postgres
	}
	return mysql
}

// Take takes the lease on name, and returns its release, or an error
// wrapping ormlock.ErrNotAcquired when a holder's lease has not run out.
// As ShedLock does: insert the row, and when it exists, update it where
// its lease has run out.
func (l *Lease) Take(ctx context.Context, name string) (release func() error, err error) {
	atMost := l.AtMost.Microseconds()
	res, err := l.DB.ExecContext(ctx, l.q(
		`INSERT INTO shedlock (name, lock_until, locked_at, locked_by)
VALUES ($1, timezone('utc', now()) + $2 * interval '1 microsecond', timezone('utc', now()), $3)
ON CONFLICT (name) DO NOTHING`,
		`INSERT INTO shedlock (name, lock_until, locked_at, locked_by)
VALUES (?, UTC_TIMESTAMP(3) + INTERVAL ? MICROSECOND, UTC_TIMESTAMP(3), ?)
ON DUPLICATE KEY UPDATE name = name`), name, atMost, l.Owner)
	if err != nil {
		return nil, fmt.Errorf("shedlock %q: %w", name, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		res, err = l.DB.ExecContext(ctx, l.q(
			`UPDATE shedlock SET lock_until = timezone('utc', now()) + $2 * interval '1 microsecond',
	locked_at = timezone('utc', now()), locked_by = $3
WHERE name = $1 AND lock_until <= timezone('utc', now())`,
			`UPDATE shedlock SET lock_until = UTC_TIMESTAMP(3) + INTERVAL ? MICROSECOND,
	locked_at = UTC_TIMESTAMP(3), locked_by = ?
WHERE name = ? AND lock_until <= UTC_TIMESTAMP(3)`), l.args(name, atMost)...)
		if err != nil {
			return nil, fmt.Errorf("shedlock %q: %w", name, err)
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return nil, fmt.Errorf("%w: shedlock %q: leased by another node", ormlock.ErrNotAcquired, name)
		}
	}
	return func() error { return l.release(ctx, name) }, nil
}

// args orders the update's arguments for l's placeholders: PostgreSQL's
// are numbered, MySQL's positional (lock_until, locked_by, name).
func (l *Lease) args(name string, atMost int64) []any {
	if l.Postgres {
		return []any{name, atMost, l.Owner}
	}
	return []any{atMost, l.Owner, name}
}

// release ends the lease as ShedLock does: lock_until becomes the later of
// locked_at + AtLeast and now, so a node whose trigger comes a little late
// does not run the job again. Detached from ctx's cancellation, as a
// release must be.
func (l *Lease) release(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	atLeast := l.AtLeast.Microseconds()
	var err error
	if l.Postgres {
		_, err = l.DB.ExecContext(ctx, `UPDATE shedlock
SET lock_until = GREATEST(locked_at + $1 * interval '1 microsecond', timezone('utc', now()))
WHERE name = $2 AND locked_by = $3`, atLeast, name, l.Owner)
	} else {
		_, err = l.DB.ExecContext(ctx, `UPDATE shedlock
SET lock_until = GREATEST(locked_at + INTERVAL ? MICROSECOND, UTC_TIMESTAMP(3))
WHERE name = ? AND locked_by = ?`, atLeast, name, l.Owner)
	}
	if err != nil {
		return fmt.Errorf("shedlock %q: release: %w", name, err)
	}
	return nil
}

// Locker is the gocron.Locker of the rolling deploy's "both" release
// (docs/MIGRATING.md, The rolling deploy: a dual-lock phase): it takes
// ShedLock's lease on the job's name first, as the ShedLock nodes still
// running take it, then ormlock's run, and gives them up in the reverse
// order. The old lock comes first so that a refusal by it leaves nothing
// in ormlock's ledger. Wrap the job's task with Next.Task to run it under
// the run's lock context: Lock passes gocron's context to Next's Lock as
// it is, which is how the task finds its run.
type Locker struct {
	Lease *Lease
	Next  *scheduler.Locker
}

var _ gocron.Locker = Locker{}

// Lock takes the lease, then ormlock's run of job's current slot.
func (l Locker) Lock(ctx context.Context, job string) (gocron.Lock, error) {
	release, err := l.Lease.Take(ctx, job)
	if err != nil {
		return nil, err // a ShedLock node (or a "both" replica) runs it
	}
	n, err := l.Next.Lock(ctx, job)
	if err != nil {
		// the slot ran, or runs, elsewhere: the lease is kept for
		// AtLeast, as after a run
		return nil, errors.Join(err, release())
	}
	return lock{next: n, release: release}, nil
}

type lock struct {
	next    gocron.Lock
	release func() error
}

// Unlock records the run in ormlock's ledger and releases its lock, then
// the lease.
func (l lock) Unlock(ctx context.Context) error {
	return errors.Join(l.next.Unlock(ctx), l.release())
}
