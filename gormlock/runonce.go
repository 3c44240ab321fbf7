package gormlock

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/ledger"
)

// RunOnce runs fn at most once per (job, slot) across every instance that
// shares the database, and records the run in the ledger table ([Migrate]).
// slot is the scheduled time, never time.Now(): take it from an
// [ormlock.Schedule], or call [RunScheduled]. A slot already done returns
// [ormlock.ErrAlreadyDone]; by default fn's work and the ledger row commit in
// one transaction, and [ormlock.WithClaim] selects claim mode for long jobs.
// Bad input wraps [ormlock.ErrInvalidArgument] (see [ormlock.ValidJob]).
// Protocol, claim mode and nesting: docs/PROTOCOL.md (The verbs on each
// server, RunOnce).
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
	c, err := prepare(db, "RunOnce", keys.RunKey(job, slot), opts)
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
// first: who ran which slot, when, for how long, and with which error, in the
// namespace in effect ([ormlock.WithNamespace], per call or a plugin
// default). It reads from the primary (with dbresolver), or from db's
// transaction when db is inside one. limit must be positive. See
// docs/PROTOCOL.md (The ledger).
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
