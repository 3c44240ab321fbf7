package gormlock

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/ledger"
)

// RunOnce runs fn at most once per (job, slot) across every instance that
// shares the database, and records each run in the ledger table (create it
// with [Migrate]).
//
// The slot is the scheduled time, never the trigger's clock:
// RunOnce(db, job, time.Now(), fn) compiles and deduplicates nothing, since
// every instance's now differs. Take it from the schedule
// (schedule.Slot(time.Now()) with [ormlock.Cron] or [ormlock.Every]), or
// call [RunScheduled], which does that. The slot is stored in UTC,
// truncated to whole microseconds.
//
// Transactional mode (the default): in one transaction,
//
//  1. the lock [ormlock.RunKey](job, slot) is taken as [Transaction] takes
//     it (PostgreSQL transaction-level advisory lock; MySQL/MariaDB GET_LOCK
//     on the pinned connection, released after COMMIT),
//  2. the ledger row (job, slot) is inserted as 'running' without any
//     duplicate-key error (see below); if the slot is already done, the
//     transaction rolls back and RunOnce returns an error wrapping
//     [ormlock.ErrAlreadyDone] (observer event EventAlreadyDone) without
//     calling fn,
//  3. fn(tx) runs,
//  4. the row is marked 'done' with its finish time, and the transaction
//     commits: fn's writes and the ledger row commit together.
//
// If fn fails (or panics) everything rolls back, no row remains, fn's error
// is returned unchanged (the panic re-raised), and a later trigger may retry.
// When another instance is running the slot right now, RunOnce returns an
// error wrapping [ormlock.ErrNotAcquired] at once, or waits per
// [ormlock.WithWait] (and then usually finds the slot done). The context is
// GORM's (db.WithContext). At any isolation level ([ormlock.WithTxOptions])
// a call that waited while another instance ran the slot sees that run and
// returns ErrAlreadyDone (see Transaction's isolation levels in the package
// documentation).
//
// Claim mode ([ormlock.WithClaim]), for long jobs or work that is not
// transactional: the lock is held for the whole run as [Session] holds it
// (a dedicated connection with a keepalive), a 'running' row is committed
// first (taking over a row left 'failed', or 'running' by an owner that
// died), fn runs with a plain, non-transactional db bound to the session's
// context (db.WithContext(ctx)), and the row is then marked 'done', or
// 'failed' with fn's error text, so the ledger shows the run while it is
// going on. A failed slot is retried by the next trigger. If the lock is
// lost, fn's context is cancelled with cause [ormlock.ErrLockLost], RunOnce
// returns an error wrapping ErrLockLost, and the row is marked failed (or
// done, if fn nevertheless returned nil and no other instance has taken the
// slot over). Claim mode needs two connections of the pool while fn runs,
// and a db that is not inside a transaction.
//
// The namespace in effect ([ormlock.WithNamespace]) is part of the run's
// identity: the lock is RunKey in that namespace and the ledger row is
// (namespace, job, slot), so services with different namespaces sharing a
// ledger table run their own jobs of the same name (docs/PROTOCOL.md).
//
// Duplicate keys: the row is claimed with INSERT ... ON CONFLICT (namespace,
// job, slot) DO UPDATE ... WHERE status <> 'done' on PostgreSQL and INSERT ... ON
// DUPLICATE KEY UPDATE on MySQL/MariaDB, never with a plain INSERT that could
// fail (and fill the server log with duplicate-key errors) nor with INSERT
// IGNORE, which would also turn unrelated errors into warnings.
//
// Nested calls follow [Transaction]: on PostgreSQL a db inside a transaction
// gets a savepoint (the lock and the row commit with the outer transaction);
// on MySQL/MariaDB it is an error wrapping [ErrNestedTransaction].
//
// Bad input is an error wrapping [ormlock.ErrInvalidArgument]: a nil db or
// fn, an empty job name (or one longer than 191 characters, or one ending
// with a space, which MySQL/MariaDB would not tell apart), a zero slot.
func RunOnce(db *gorm.DB, job string, slot time.Time, fn func(tx *gorm.DB) error, opts ...ormlock.Option) error {
	const verb = "gormlock.RunOnce"
	if fn == nil {
		return fmt.Errorf("%w: %s: nil fn", ormlock.ErrInvalidArgument, verb)
	}
	if err := ledger.ValidateJob(verb, job); err != nil {
		return err
	}
	if err := ledger.ValidateSlot(verb, slot); err != nil {
		return err
	}
	c, err := prepare(db, "RunOnce", ormlock.RunKey(job, slot), opts)
	if err != nil {
		return err
	}
	r, err := ledger.NewRun(verb, c.op, job, slot)
	if err != nil {
		return err
	}
	if c.op.Cfg.Claim {
		if inTx(c.db) {
			return fmt.Errorf("%w: %s: WithClaim with a db inside a transaction: claim mode commits its ledger rows itself and runs fn outside any transaction", ormlock.ErrInvalidArgument, verb)
		}
		sqlDB, err := primarySQL(c.db)
		if err != nil {
			return err
		}
		return r.Claimed(c.ctx, sqlDB, func(ctx context.Context) error {
			return fn(c.db.WithContext(ctx))
		})
	}
	return c.transaction(func(tx *gorm.DB) error {
		q, err := sqlTx(tx)
		if err != nil {
			return err
		}
		return r.InTx(c.ctx, q, func() error { return fn(tx) })
	})
}

// Runs returns the last limit runs of job from the ledger table, newest slot
// first: the audit trail of who ran which slot, when, for how long, and with
// which error. It returns the runs of the namespace in effect
// ([ormlock.WithNamespace], per call or a plugin default), as RunOnce records
// them: the namespace is part of a run's identity. It reads from the primary (with dbresolver), or from db's
// transaction when db is inside one. limit must be positive.
func Runs(db *gorm.DB, job string, limit int, opts ...ormlock.Option) ([]ormlock.Run, error) {
	const verb = "gormlock.Runs"
	if db == nil {
		return nil, fmt.Errorf("%w: %s: nil *gorm.DB", ormlock.ErrInvalidArgument, verb)
	}
	if db.Error != nil {
		return nil, db.Error
	}
	if err := ledger.ValidateJob(verb, job); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, fmt.Errorf("%w: %s: limit must be positive, got %d", ormlock.ErrInvalidArgument, verb, limit)
	}
	d, err := dialectOf(db)
	if err != nil {
		return nil, err
	}
	cfg, err := configFor(db, opts)
	if err != nil {
		return nil, err
	}
	if err := cfg.Err(); err != nil {
		return nil, err
	}
	t, err := ledger.NewTable(d, cfg.LedgerTable)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	if db.Statement != nil && db.Statement.Context != nil {
		ctx = db.Statement.Context
	}
	var q interface {
		QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	}
	if inTx(db) {
		txq, err := sqlTx(db)
		if err != nil {
			return nil, err
		}
		var ok bool
		if q, ok = txq.(interface {
			QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
		}); !ok {
			return nil, fmt.Errorf("ormlock: GORM transaction pool %T cannot run queries", txq)
		}
	} else if q, err = primarySQL(db); err != nil {
		return nil, err
	}
	return t.Runs(ctx, q, cfg.Namespace, job, limit)
}
