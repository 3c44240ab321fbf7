package conformance_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// slotRecorder is a Schedule that records the times it maps and maps them
// all to one slot.
type slotRecorder struct {
	slot  time.Time
	asked []time.Time
}

func (s *slotRecorder) Slot(t time.Time) time.Time {
	s.asked = append(s.asked, t)
	return s.slot
}

// RunScheduled takes the slot from the schedule at the current time: two
// instances firing apart run the slot once.
func TestRunScheduled(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r := openRunner(t, a, k)
		tbl := ledgerTable(t, k, r)
		opt := ormlock.WithLedgerTable(tbl)
		sched := &slotRecorder{slot: time.Date(2033, 3, 3, 0, 0, 0, 0, time.UTC)}
		ran := 0
		fn := func(txn) error { ran++; return nil }
		before := time.Now()
		if err := r.RunScheduled(ctx, "scheduled", sched, fn, opt); err != nil {
			t.Fatalf("first: %v", err)
		}
		if err := r.RunScheduled(ctx, "scheduled", sched, fn, opt); !errors.Is(err, ormlock.ErrAlreadyDone) {
			t.Fatalf("second: %v, want ErrAlreadyDone", err)
		}
		if ran != 1 || len(sched.asked) != 2 || sched.asked[0].Before(before) || time.Since(sched.asked[0]) > time.Minute {
			t.Fatalf("ran %d times; schedule asked for %v (want the current time)", ran, sched.asked)
		}
		if rs := runsOf(t, r, tbl, "scheduled"); len(rs) != 1 || !rs[0].Slot.Equal(sched.slot) {
			t.Fatalf("ledger: %+v", rs)
		}
		if err := r.RunScheduled(ctx, "scheduled", nil, fn, opt); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Fatalf("nil schedule: %v", err)
		}
	})
}
