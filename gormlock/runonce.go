package gormlock

import (
	"context"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/sched"
	"github.com/ormlock/ormlock/internal/verbs"
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
	if db != nil { // fn's context carries the slot (ormlock.Slot)
		db = db.WithContext(sched.WithSlot(ctxOf(db), keys.NormalizeSlot(slot)))
	}
	ctx := ctxOf(db)
	p, err := verbs.Open(ctx, binder{db}, pkg, "RunOnce", opts, verbs.Args{NilFn: fn == nil, Err: ledger.CheckRunOnce(pkg+".RunOnce", false, job, slot)})
	if err != nil {
		return err
	}
	r, op, err := p.Run(ctx, job, slot)
	if err != nil {
		return err
	}
	c := call{db: db, ctx: ctx, p: p, op: op}
	c.start()
	if p.Cfg.Claim {
		err = r.Claimed(c.ctx, p.DB, func(ctx context.Context) error { return fn(db.WithContext(ctx)) })
	} else {
		err = c.transaction(func(tx *gorm.DB) error {
			q, err := sqlTx(tx)
			if err != nil {
				return err
			}
			return r.InTx(c.ctx, q, func() error { return fn(tx) })
		})
	}
	c.op.EndHook(c.ctx, err)
	return err
}
