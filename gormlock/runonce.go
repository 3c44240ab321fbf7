package gormlock

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/sched"
)

// RunOnce runs fn at most once per (job, slot) across every instance that
// shares the database, and records the run in the ledger table ([Migrate]).
// slot is the scheduled time, never time.Now(): take it from an
// [ormlock.Schedule], or call [RunScheduled] (a slot with a fraction of a
// second is refused). fn reads the slot with
// ormlock.Slot(tx.Statement.Context). A slot already done returns
// [ormlock.ErrAlreadyDone]; by default fn's work and the ledger row commit in
// one transaction, and [ormlock.WithClaim] selects claim mode for long jobs.
// A job name is valid UTF-8 without NUL bytes or a trailing space, at most
// 191 characters; bad input wraps [ormlock.ErrInvalidArgument].
// Protocol, claim mode and nesting: docs/PROTOCOL.md (The verbs on each
// server, RunOnce).
func RunOnce(db *gorm.DB, job string, slot time.Time, fn func(tx *gorm.DB) error, opts ...ormlock.Option) error {
	const verb = "gormlock.RunOnce"
	if err := ledger.CheckRunOnce(verb, fn == nil, job, slot); err != nil {
		return err
	}
	if db != nil { // fn's context carries the slot (ormlock.Slot)
		db = db.WithContext(sched.WithSlot(ctxOf(db), keys.NormalizeSlot(slot)))
	}
	c, err := prepare(db, "RunOnce", keys.RunKey(job, slot), opts, true)
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

// RunScheduled is [RunOnce] for the slot of the current time under
// schedule: RunOnce(db, job, schedule.Slot(time.Now()), fn, opts...). It
// is the form that cannot get the slot wrong: every instance that fires for
// the same scheduled time, a little early or late, passes the same slot,
// which a slot taken from the trigger's own clock would not (see
// [ormlock.Schedule]). With [ormlock.WithCatchUp] it first runs the missed
// slots of the window; fn reads the slot it runs with
// ormlock.Slot(tx.Statement.Context). A nil schedule is an error wrapping
// [ormlock.ErrInvalidArgument]. See docs/SCHEDULES.md (Catch-up of missed
// slots).
func RunScheduled(db *gorm.DB, job string, schedule ormlock.Schedule, fn func(tx *gorm.DB) error, opts ...ormlock.Option) error {
	const verb = "gormlock.RunScheduled"
	return ledger.Scheduled(ctxOf(db), verb, job, schedule, func() (ledger.Reader, error) { return readerOf(db, verb, opts, nil) },
		func(slot time.Time) error { return RunOnce(db, job, slot, fn, opts...) })
}

// Runs returns the last limit runs of job from the ledger table, newest slot
// first: who ran which slot, when, for how long, and with which error, in the
// namespace in effect ([ormlock.WithNamespace], per call or a plugin
// default). It reads from the primary (with dbresolver), or from db's
// transaction when db is inside one. limit must be positive. See
// docs/PROTOCOL.md (The ledger).
func Runs(db *gorm.DB, job string, limit int, opts ...ormlock.Option) ([]ormlock.Run, error) {
	const verb = "gormlock.Runs"
	r, err := readerOf(db, verb, opts, ledger.CheckRuns(verb, job, limit))
	if err == nil {
		var d lockproto.Dialect
		if d, err = dialectOf(db); err == nil {
			err = checkPool(db, d)
		}
	}
	if err != nil {
		return nil, err
	}
	return ledger.RunsAs[ormlock.Run](r.T.Runs(ctxOf(db), r.Q, r.Cfg.Namespace, job, limit))
}

// readerOf returns what reading the ledger through db needs, the call
// checked as open does: the settings (the plugin's defaults with opts), the
// table, and a querier on the primary, or on db's transaction when db is
// inside one.
func readerOf(db *gorm.DB, verb string, opts []ormlock.Option, argErr error) (ledger.Reader, error) {
	d, cfg, err := open(db, verb, opts, argErr)
	if err != nil {
		return ledger.Reader{}, err
	}
	t, err := ledger.NewTable(d, cfg.LedgerTable)
	if err != nil {
		return ledger.Reader{}, err
	}
	r := ledger.Reader{Cfg: cfg, T: t}
	if inTx(db) {
		txq, err := sqlTx(db)
		if err != nil {
			return ledger.Reader{}, err
		}
		var ok bool
		if r.Q, ok = txq.(ledger.Querier); !ok {
			return ledger.Reader{}, fmt.Errorf("ormlock: GORM transaction pool %T cannot run queries", txq)
		}
	} else if r.Q, err = primarySQL(db); err != nil {
		return ledger.Reader{}, err
	}
	return r, nil
}
