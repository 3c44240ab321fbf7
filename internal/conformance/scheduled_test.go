package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/schedhook"
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

// slotOf is the slot fn runs for, as fn reads it: ormlock.Slot on a
// gormlock tx's context, entlock.Slot on an ent tx, ormlock.Slot on fn's
// ctx for sqllock and pgxlock.
func slotOf(tx txn) (time.Time, bool) {
	switch tx := tx.(type) {
	case gormTx:
		return ormlock.Slot(tx.tx.Statement.Context)
	case entTx:
		return entlock.Slot(tx.tx)
	case sqlTx:
		return ormlock.Slot(tx.ctx)
	case pgxTx:
		return ormlock.Slot(tx.ctx)
	}
	return time.Time{}, false
}

// Three replicas ran an hourly job until slot H, were down for slots H+1h,
// H+2h and H+3h, and start together at H+4h (a schedhook.Now clock stands
// for the hours): with CatchUpAll every missed slot runs exactly once, with
// CatchUpLatest only the newest, and with a window that ends after H+1h
// nothing older than the window; the current slot runs once in each case,
// and fn reads the slot it runs.
func TestRunScheduledCatchUp(t *testing.T) {
	h := time.Date(2034, 6, 1, 10, 0, 0, 0, time.UTC)
	hour := func(i int) time.Time { return h.Add(time.Duration(i) * time.Hour) }
	cases := []struct {
		name   string
		window time.Duration
		policy ormlock.CatchUpPolicy
		want   []time.Time // the slots run at start, oldest first
	}{
		{"all", 270 * time.Minute, ormlock.CatchUpAll, []time.Time{hour(1), hour(2), hour(3), hour(4)}},
		{"latest", 6 * time.Hour, ormlock.CatchUpLatest, []time.Time{hour(3), hour(4)}},
		{"window", 150 * time.Minute, ormlock.CatchUpAll, []time.Time{hour(2), hour(3), hour(4)}},
	}
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		replicas := []runner{openRunner(t, a, k), openRunner(t, a, k), openRunner(t, a, k)}
		tbl := ledgerTable(t, k, replicas[0])
		every, err := ormlock.Every(time.Hour, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				job := "catchup-" + c.name
				opts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithCatchUp(c.window, c.policy)}
				at := func(now time.Time) ormlock.Option { return schedhook.Now(now) }
				// the last run before the outage (a first call with catch-up
				// would catch up the hours before it too)
				if err := replicas[0].RunScheduled(context.Background(), job, every, func(txn) error { return nil }, opts[0], at(hour(0).Add(time.Minute))); err != nil {
					t.Fatalf("run of H: %v", err)
				}
				var mu sync.Mutex
				var ran []time.Time
				fn := func(tx txn) error {
					s, ok := slotOf(tx)
					if !ok {
						return errors.New("fn cannot read its slot")
					}
					mu.Lock()
					defer mu.Unlock()
					ran = append(ran, s)
					return nil
				}
				start := make(chan struct{})
				errs := make(chan error, len(replicas))
				for i, r := range replicas {
					go func() {
						<-start
						// the replicas' clocks differ by a few seconds
						errs <- r.RunScheduled(context.Background(), job, every, fn, append(opts, at(hour(4).Add(time.Duration(i)*time.Second)))...)
					}()
				}
				close(start)
				for range replicas {
					if err := <-errs; err != nil && !errors.Is(err, ormlock.ErrAlreadyDone) && !errors.Is(err, ormlock.ErrNotAcquired) {
						t.Errorf("RunScheduled: %v", err)
					}
				}
				sort.Slice(ran, func(i, j int) bool { return ran[i].Before(ran[j]) })
				if fmt.Sprint(ran) != fmt.Sprint(c.want) {
					t.Errorf("fn ran for %v, want each of %v once", ran, c.want)
				}
				var done []string
				for _, r := range runsOf(t, replicas[0], tbl, job) {
					done = append(done, r.Slot.Format("15:04")+" "+string(r.Status))
				}
				want := []string{}
				for i := len(c.want) - 1; i >= 0; i-- {
					want = append(want, c.want[i].Format("15:04")+" done")
				}
				want = append(want, "10:00 done")
				if strings.Join(done, ", ") != strings.Join(want, ", ") {
					t.Errorf("ledger: %v, want %v", done, want)
				}
			})
		}
	})
}

// CatchUpAll stops at the first missed slot that fails and returns its
// error; the next call runs it again, then the rest. A Prune window shorter
// than the catch-up window given with it is refused, and so is catch-up on
// a schedule it cannot list.
func TestRunScheduledCatchUpFailure(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		tbl := ledgerTable(t, k, r)
		every, err := ormlock.Every(time.Minute, nil)
		if err != nil {
			t.Fatal(err)
		}
		m := time.Date(2034, 6, 1, 10, 0, 0, 0, time.UTC)
		at := context.Background()
		opts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithCatchUp(5*time.Minute, ormlock.CatchUpAll), schedhook.Now(m.Add(3 * time.Minute))}
		var ran []time.Time
		boom := errors.New("boom")
		fn := func(fail bool) func(tx txn) error {
			return func(tx txn) error {
				s, _ := slotOf(tx)
				ran = append(ran, s)
				if fail && s.Equal(m) {
					return boom
				}
				return nil
			}
		}
		if err := r.RunScheduled(at, "fails", every, fn(true), opts...); !errors.Is(err, boom) {
			t.Fatalf("first call: %v, want fn's error", err)
		}
		// the window holds 09:59 to 10:02: 09:59 ran, 10:00 failed, the rest waits
		if len(ran) != 2 {
			t.Fatalf("ran %v, want two slots before the failure", ran)
		}
		ran = nil
		if err := r.RunScheduled(at, "fails", every, fn(false), opts...); err != nil {
			t.Fatalf("second call: %v", err)
		}
		if len(ran) != 4 || !ran[0].Equal(m) || !ran[3].Equal(m.Add(3*time.Minute)) {
			t.Fatalf("second call ran %v, want 10:00 to 10:03", ran)
		}
		if _, err := r.Prune(context.Background(), time.Minute, opts...); !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "catch-up window") {
			t.Fatalf("Prune shorter than the catch-up window: %v", err)
		}
		if err := r.RunScheduled(context.Background(), "custom", &slotRecorder{slot: m}, fn(false), opts...); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Fatalf("catch-up with a schedule it cannot list: %v", err)
		}
	})
}
