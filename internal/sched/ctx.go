package sched

import (
	"context"
	"time"
)

type slotKey struct{}

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
