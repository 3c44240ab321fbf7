package entlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/enttest/ent"
	"github.com/ormlock/ormlock/internal/testdb"
)

// fixedSlot maps every time to one slot.
type fixedSlot time.Time

func (s fixedSlot) Slot(time.Time) time.Time { return time.Time(s) }

func TestRunScheduled(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		client, _ := openEnt(t, k)
		tbl := ledgerTable(t, k, client)
		opt := ormlock.WithLedgerTable(tbl)
		slot := time.Date(2033, 3, 3, 0, 0, 0, 0, time.UTC)
		ran := 0
		fn := func(*ent.Tx) error { ran++; return nil }
		if err := entlock.RunScheduled(ctx, client, "scheduled", fixedSlot(slot), fn, opt); err != nil {
			t.Fatalf("first: %v", err)
		}
		if err := entlock.RunScheduled(ctx, client, "scheduled", fixedSlot(slot), fn, opt); !errors.Is(err, ormlock.ErrAlreadyDone) {
			t.Fatalf("second: %v, want ErrAlreadyDone", err)
		}
		if rs := runs(t, client, tbl, "scheduled"); ran != 1 || len(rs) != 1 || !rs[0].Slot.Equal(slot) {
			t.Fatalf("ran %d times, ledger %+v", ran, rs)
		}
		if err := entlock.RunScheduled(ctx, client, "scheduled", nil, fn, opt); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Fatalf("nil schedule: %v", err)
		}
	})
}
