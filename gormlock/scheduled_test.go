package gormlock_test

import (
	"errors"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/gormtest"
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
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := gormtest.Open(t, k)
		tbl := ledgerTable(t, k, db)
		opt := ormlock.WithLedgerTable(tbl)
		sched := &slotRecorder{slot: time.Date(2033, 3, 3, 0, 0, 0, 0, time.UTC)}
		ran := 0
		fn := func(*gorm.DB) error { ran++; return nil }
		before := time.Now()
		if err := gormlock.RunScheduled(db, "scheduled", sched, fn, opt); err != nil {
			t.Fatalf("first: %v", err)
		}
		if err := gormlock.RunScheduled(db, "scheduled", sched, fn, opt); !errors.Is(err, ormlock.ErrAlreadyDone) {
			t.Fatalf("second: %v, want ErrAlreadyDone", err)
		}
		if ran != 1 || len(sched.asked) != 2 || sched.asked[0].Before(before) || time.Since(sched.asked[0]) > time.Minute {
			t.Fatalf("ran %d times; schedule asked for %v (want the current time)", ran, sched.asked)
		}
		if rs := runs(t, db, tbl, "scheduled"); len(rs) != 1 || !rs[0].Slot.Equal(sched.slot) {
			t.Fatalf("ledger: %+v", rs)
		}
		if err := gormlock.RunScheduled(db, "scheduled", nil, fn, opt); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Fatalf("nil schedule: %v", err)
		}
	})
}
