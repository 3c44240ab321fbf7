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
		r, tbl := openWithLedger(t, a, k)
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

// midway returns a schedule of period p (an hour: minute field; a minute:
// second field) whose slots lie half a period from now, and its current
// slot: a test on the real clock that lasts less than half a period sees
// one current slot. The clock is real because catch-up judges its window by
// the server's clock (and refuses a caller's more than a minute from it).
func midway(t *testing.T, p time.Duration) (ormlock.Schedule, time.Time) {
	t.Helper()
	now := time.Now().UTC()
	spec := fmt.Sprintf("%d * * * *", (now.Minute()+30)%60)
	if p == time.Minute {
		spec = fmt.Sprintf("%d * * * * *", (now.Second()+30)%60)
	}
	s, err := ormlock.Cron(spec, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	return s, s.Slot(now)
}

// Three replicas ran an hourly job until slot H, were down for slots H+1h,
// H+2h and H+3h, and start together half an hour into H+4h: with
// CatchUpAll every missed slot runs exactly once, with CatchUpLatest only
// the newest, and with a window that starts after H+1h nothing older than
// the window; the current slot runs once in each case, and fn reads the
// slot it runs.
func TestRunScheduledCatchUp(t *testing.T) {
	every, h := midway(t, time.Hour)
	h = h.Add(-4 * time.Hour)
	hour := func(i int) time.Time { return h.Add(time.Duration(i) * time.Hour) }
	cases := []struct {
		name   string
		window time.Duration
		policy ormlock.CatchUpPolicy
		want   []time.Time // the slots run at start, oldest first
	}{
		{"all", 4 * time.Hour, ormlock.CatchUpAll, []time.Time{hour(1), hour(2), hour(3), hour(4)}},
		{"latest", 6 * time.Hour, ormlock.CatchUpLatest, []time.Time{hour(3), hour(4)}},
		{"window", 3 * time.Hour, ormlock.CatchUpAll, []time.Time{hour(2), hour(3), hour(4)}},
	}
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		replicas := []runner{openRunner(t, a, k), openRunner(t, a, k), openRunner(t, a, k)}
		tbl := ledgerTable(t, k, replicas[0])
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				job := "catchup-" + c.name
				opts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithCatchUp(c.window, c.policy)}
				// the last run before the outage (a first call with catch-up
				// would catch up the hours before it too)
				if err := replicas[0].RunOnce(context.Background(), job, hour(0), func(txn) error { return nil }, opts[0]); err != nil {
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
				for _, r := range replicas {
					go func() {
						<-start
						errs <- r.RunScheduled(context.Background(), job, every, fn, opts...)
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
				want = append(want, hour(0).Format("15:04")+" done")
				if strings.Join(done, ", ") != strings.Join(want, ", ") {
					t.Errorf("ledger: %v, want %v", done, want)
				}
			})
		}
	})
}

// CatchUpAll stops at the first missed slot that fails and returns its
// error; the next call runs it again, then the rest. A Prune window shorter
// than the catch-up window given with it plus a minute is refused, and so
// is catch-up on a schedule it cannot list.
func TestRunScheduledCatchUpFailure(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r, tbl := openWithLedger(t, a, k)
		// a minutely schedule, now half a minute into its slot m+3m
		every, cur := midway(t, time.Minute)
		m := cur.Add(-3 * time.Minute)
		ctx := context.Background()
		opts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithCatchUp(5*time.Minute, ormlock.CatchUpAll)}
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
		if err := r.RunScheduled(ctx, "fails", every, fn(true), opts...); !errors.Is(err, boom) {
			t.Fatalf("first call: %v, want fn's error", err)
		}
		// the window holds m-1m to m+2m: m-1m ran, m failed, the rest waits
		if len(ran) != 2 {
			t.Fatalf("ran %v, want two slots before the failure", ran)
		}
		ran = nil
		if err := r.RunScheduled(ctx, "fails", every, fn(false), opts...); err != nil {
			t.Fatalf("second call: %v", err)
		}
		if len(ran) != 4 || !ran[0].Equal(m) || !ran[3].Equal(cur) {
			t.Fatalf("second call ran %v, want m to m+3m", ran)
		}
		for _, olderThan := range []time.Duration{time.Minute, 5 * time.Minute, 5*time.Minute + 59*time.Second} {
			if _, err := r.Prune(ctx, olderThan, opts...); !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "catch-up window") || !strings.Contains(err.Error(), "margin") {
				t.Fatalf("Prune(%v) with a catch-up window of 5m: %v, want ErrInvalidArgument naming the window and the margin", olderThan, err)
			}
		}
		// the window and the margin: taken, and the window's rows stay
		if n, err := r.Prune(ctx, 6*time.Minute, opts...); err != nil || n != 0 {
			t.Fatalf("Prune(6m) with a catch-up window of 5m: %d, %v; want 0 rows deleted", n, err)
		}
		if err := r.RunScheduled(ctx, "custom", &slotRecorder{slot: m}, fn(false), opts...); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Fatalf("catch-up with a schedule it cannot list: %v", err)
		}
	})
}
