package sched

import (
	"context"
	"time"
)

type (
	slotKey struct{}
	nowKey  struct{}
)

// WithSlot returns ctx carrying slot, the slot a RunOnce fn runs for
// (ormlock.Slot reads it).
func WithSlot(ctx context.Context, slot time.Time) context.Context {
	return context.WithValue(ctx, slotKey{}, slot)
}

// SlotFrom returns the slot that ctx carries.
func SlotFrom(ctx context.Context) (time.Time, bool) {
	if ctx == nil {
		return time.Time{}, false
	}
	t, ok := ctx.Value(slotKey{}).(time.Time)
	return t, ok
}

// WithNow returns ctx carrying the time RunScheduled maps to its slot, in
// place of a reading of the clock (the scheduler adapters pass the time a
// job fired, and tests theirs).
func WithNow(ctx context.Context, now time.Time) context.Context {
	return context.WithValue(ctx, nowKey{}, now)
}

// Now returns the time ctx carries (WithNow), else a reading of ctx's
// clock (WithClock, else time.Now()).
func Now(ctx context.Context) time.Time {
	if ctx != nil {
		if t, ok := ctx.Value(nowKey{}).(time.Time); ok {
			return t
		}
	}
	return Clock(ctx)()
}

type clockKey struct{}

// WithClock returns ctx carrying the clock that RunScheduled's catch-up
// compares with the database server's, read when it reads the ledger
// (after any wait before it): the scheduler adapters' clock (their
// WithClock option).
func WithClock(ctx context.Context, clock func() time.Time) context.Context {
	return context.WithValue(ctx, clockKey{}, clock)
}

// Clock returns the clock ctx carries (WithClock), else time.Now.
func Clock(ctx context.Context) func() time.Time {
	if ctx != nil {
		if c, ok := ctx.Value(clockKey{}).(func() time.Time); ok && c != nil {
			return c
		}
	}
	return time.Now
}

// CatchUpMode narrows RunScheduled's catch-up for the gocron Locker, which
// answers one firing with one run.
type CatchUpMode int

const (
	// CatchUpAsConfigured: as ormlock.WithCatchUp says.
	CatchUpAsConfigured CatchUpMode = iota
	// CatchUpOneRun: one run only, for the newest slot of the window (the
	// current one included) that has not run.
	CatchUpOneRun
	// CatchUpNone: the current slot only.
	CatchUpNone
)

type modeKey struct{}

// WithCatchUpMode returns ctx carrying m.
func WithCatchUpMode(ctx context.Context, m CatchUpMode) context.Context {
	return context.WithValue(ctx, modeKey{}, m)
}

// CatchUpModeOf returns the mode ctx carries.
func CatchUpModeOf(ctx context.Context) CatchUpMode {
	m, _ := ctx.Value(modeKey{}).(CatchUpMode)
	return m
}

type bareKey struct{}

// WithBareClaim returns ctx telling a claim-mode RunOnce of sqllock or
// pgxlock whether to run fn without a transaction of its own (a nil tx):
// the scheduler backends, whose job runs outside any transaction, set it,
// so that a run does not hold a connection idle in a transaction.
func WithBareClaim(ctx context.Context, bare bool) context.Context {
	return context.WithValue(ctx, bareKey{}, bare)
}

// BareClaim reports whether ctx carries WithBareClaim(ctx, true).
func BareClaim(ctx context.Context) bool {
	b, _ := ctx.Value(bareKey{}).(bool)
	return b
}
