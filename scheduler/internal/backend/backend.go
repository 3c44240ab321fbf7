// Package backend is the database side of the scheduler adapters, built by
// the backend packages (gormsched, entsched, sqlsched, pgxsched) and used
// by package scheduler, which names it scheduler.Backend. It lives here so
// that the core package imports no ORM: a GORM program then links no ent,
// and an ent one no GORM.
package backend

import (
	"context"
	"fmt"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/schedhook"
)

// SessionFunc holds the lock named key for as long as fn runs; extra
// options (a wait) apply on top of the backend's.
type SessionFunc func(ctx context.Context, key string, fn func(ctx context.Context) error, extra ...ormlock.Option) error

// ScheduledFunc is RunScheduled in claim mode: the slot of the current
// time under s and, with ormlock.WithCatchUp among the options, the missed
// slots before it; fn reads the slot it runs with ormlock.Slot(ctx). The
// clock and the Locker's one-run catch-up come in ctx (internal/sched).
type ScheduledFunc func(ctx context.Context, job string, s ormlock.Schedule, fn func(ctx context.Context) error, extra ...ormlock.Option) error

// PruneFunc deletes the finished ledger rows older than olderThan.
type PruneFunc func(ctx context.Context, olderThan time.Duration, extra ...ormlock.Option) (int64, error)

// Funcs are a backend's operations, each required. Given to New they are
// the adapter's verbs on its db, called with every option of the call (the
// backend's and the call's extra ones); the Backend's Funcs add the
// backend's options themselves.
type Funcs struct {
	Session SessionFunc
	// Lead is the adapter's Lead (a SessionFunc's shape: campaign for key,
	// fn while elected, campaign again after a loss); the Elector's
	// campaign.
	Lead      SessionFunc
	Scheduled ScheduledFunc
	Prune     PruneFunc
	// Opts are the options the backend was built with.
	Opts []ormlock.Option
}

// Backend is scheduler.Backend: a backend's operations, or the error that
// building it met. The zero Backend is refused by Check.
type Backend struct {
	err error
	f   *Funcs
}

// New returns the Backend of the adapter's verbs f, built with opts (an
// invalid option is the Backend's error): each verb gets opts followed by
// a call's extra ones, and Scheduled also ormlock.WithClaim (its runs are
// claims).
func New(opts []ormlock.Option, f Funcs) Backend {
	if err := schedhook.CheckOptions(opts...); err != nil {
		return Failed(err)
	}
	b := &Funcs{
		Session: withOpts(f.Session, opts),
		Lead:    withOpts(f.Lead, opts),
		Scheduled: func(ctx context.Context, job string, s ormlock.Schedule, fn func(ctx context.Context) error, extra ...ormlock.Option) error {
			return f.Scheduled(ctx, job, s, fn, Claim(opts, extra)...)
		},
		Prune: func(ctx context.Context, olderThan time.Duration, extra ...ormlock.Option) (int64, error) {
			return f.Prune(ctx, olderThan, With(opts, extra)...)
		},
		Opts: opts,
	}
	return Backend{f: b}
}

// withOpts returns f with opts before a call's extra options (nil for nil).
func withOpts(f SessionFunc, opts []ormlock.Option) SessionFunc {
	if f == nil {
		return nil
	}
	return func(ctx context.Context, key string, fn func(ctx context.Context) error, extra ...ormlock.Option) error {
		return f(ctx, key, fn, With(opts, extra)...)
	}
}

// Failed returns a Backend that refuses everything with err.
func Failed(err error) Backend { return Backend{err: err} }

// Check returns why b cannot be used by verb (a constructor), or nil.
func (b Backend) Check(verb string) error {
	switch {
	case b.err != nil:
		return b.err
	case b.f == nil || b.f.Session == nil || b.f.Scheduled == nil || b.f.Prune == nil:
		return fmt.Errorf("%w: %s: zero Backend (build one with gormsched, entsched, sqlsched or pgxsched.Backend)", ormlock.ErrInvalidArgument, verb)
	}
	return nil
}

// Funcs returns b's operations; b must have passed Check.
func (b Backend) Funcs() *Funcs { return b.f }

// With returns the backend's options followed by a call's extra ones,
// without writing into opts' array.
func With(opts, extra []ormlock.Option) []ormlock.Option {
	return append(opts[:len(opts):len(opts)], extra...)
}

// Claim is With plus ormlock.WithClaim: the options of a scheduled run.
func Claim(opts, extra []ormlock.Option) []ormlock.Option {
	return append(With(opts, extra), ormlock.WithClaim())
}
