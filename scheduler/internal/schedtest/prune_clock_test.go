package schedtest_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/gormsched"
)

// slotCount counts the runs of each slot of one job, wherever they ran.
type slotCount struct {
	mu sync.Mutex
	n  map[time.Time]int
}

func (c *slotCount) ran(slot time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[time.Time]int{}
	}
	c.n[slot.UTC()]++
}

func (c *slotCount) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.n {
		n += v
	}
	return n
}

// twice reports every slot that ran more than once.
func (c *slotCount) twice(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var slots []time.Time
	for s, n := range c.n {
		if n > 1 {
			slots = append(slots, s)
		}
	}
	sort.Slice(slots, func(i, j int) bool { return slots[i].Before(slots[j]) })
	for _, s := range slots {
		t.Errorf("slot %s ran %d times", s.Format(time.RFC3339), c.n[s])
	}
}

// job returns a JobFunc that counts the slot it runs.
func (c *slotCount) job(t *testing.T) scheduler.JobFunc {
	return func(ctx context.Context) error {
		s, ok := ormlock.Slot(ctx)
		if !ok {
			t.Error("no slot in the job's context")
			return errors.New("no slot")
		}
		c.ran(s)
		return nil
	}
}

// runDone records a done run of each slot of s (an Every schedule of
// period p in UTC) from the slot of from to to, in namespace ns, counting
// each in c.
func runDone(t *testing.T, db *gorm.DB, job, ns string, s ormlock.Schedule, p time.Duration, from, to time.Time, c *slotCount) {
	t.Helper()
	for slot := s.Slot(from); !slot.After(to); slot = slot.Add(p) {
		if err := gormlock.RunOnce(db, job, slot, func(*gorm.DB) error { c.ran(slot); return nil }, ormlock.WithNamespace(ns)); err != nil {
			t.Fatalf("RunOnce of %s: %v", slot.Format(time.RFC3339), err)
		}
	}
}

// A Prune whose window equals the catch-up window, made by a replica whose
// clock is right, and then a catch-up (JobWrapper, CatchUpAll) on a replica
// whose clock is off by up to the stated bound (1 minute): no slot whose
// run was recorded runs again, although its row may be gone (the replica's
// own now - window reaches back past the pruner's cut). Both edges are
// judged by the database server's clock. A replica further off than the
// bound runs nothing and reports an error naming the skew.
func TestCatchUpAfterPruneSkewedClock(t *testing.T) {
	const window = 2 * time.Minute
	s, err := ormlock.Every(10*time.Second, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		pruner := openGorm(t, k)
		migrate(t, pruner)
		replica := openGorm(t, k)
		for _, c := range []struct {
			skew   time.Duration
			refuse bool // beyond the bound: a loud error, no run
		}{
			{-20 * time.Second, false},
			{-55 * time.Second, false},
			{55 * time.Second, false},
			{-2 * time.Minute, true},
			{2 * time.Minute, true},
		} {
			t.Run(fmt.Sprint(c.skew), func(t *testing.T) {
				job := jobName(t)
				ns := job // a namespace of its own: Prune touches nothing else
				var count slotCount
				now := time.Now()
				runDone(t, pruner, job, ns, s, 10*time.Second, now.Add(-window-90*time.Second), now, &count)
				// the pruner's window is the catch-up window; configured
				// apart from it, so nothing refuses it
				if _, err := gormlock.Prune(pruner, window, ormlock.WithNamespace(ns)); err != nil {
					t.Fatalf("Prune: %v", err)
				}
				before := count.total()
				var handled errs
				b := gormsched.Backend(replica, ormlock.WithNamespace(ns), ormlock.WithOwner("skewed"), ormlock.WithCatchUp(window, ormlock.CatchUpAll))
				w, err := scheduler.JobWrapper(b, job, s, scheduler.WithClock(skewed(c.skew)), scheduler.WithErrorHandler(handled.handle))
				if err != nil {
					t.Fatal(err)
				}
				w(count.job(t)).Run()
				count.twice(t)
				got := handled.get()
				if !c.refuse {
					for _, err := range got {
						t.Errorf("reported: %v", err)
					}
					return
				}
				if n := count.total() - before; n != 0 {
					t.Errorf("a replica %v off ran %d slot(s), want none", c.skew, n)
				}
				if len(got) != 1 || !strings.Contains(got[0].Error(), "clock") {
					t.Fatalf("a replica %v off reported %v, want one error naming the clocks' difference", c.skew, got)
				}
				t.Logf("reported: %v", got[0])
			})
		}
	})
}

// WithExclusive: a firing that waits for the job's run on another replica
// judges its catch-up window when the wait is over, not when it fired: a
// Prune (window = the catch-up window) made during the wait never makes a
// slot run again.
func TestCatchUpAfterPruneDuringExclusiveWait(t *testing.T) {
	const window = 30 * time.Second
	s := everySecond(t)
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		dbA := openGorm(t, k)
		migrate(t, dbA)
		dbB := openGorm(t, k)
		job := jobName(t)
		ns := job
		var count slotCount
		now := time.Now()
		runDone(t, dbA, job, ns, s, time.Second, now.Add(-window-10*time.Second), now.Add(-time.Second), &count)
		opts := []ormlock.Option{ormlock.WithNamespace(ns), ormlock.WithCatchUp(window, ormlock.CatchUpAll)}
		var handled errs
		started, release := make(chan struct{}), make(chan struct{})
		a, err := scheduler.JobWrapper(gormsched.Backend(dbA, append(opts, ormlock.WithOwner("a"))...), job, s,
			scheduler.WithExclusive(0), scheduler.WithErrorHandler(handled.handle))
		if err != nil {
			t.Fatal(err)
		}
		fired := make(chan struct{})
		var once sync.Once
		clockB := func() time.Time {
			once.Do(func() { close(fired) })
			return time.Now()
		}
		b, err := scheduler.JobWrapper(gormsched.Backend(dbB, append(opts, ormlock.WithOwner("b"))...), job, s,
			scheduler.WithExclusive(time.Minute), scheduler.WithClock(clockB), scheduler.WithErrorHandler(handled.handle))
		if err != nil {
			t.Fatal(err)
		}
		// every wait is bounded: a failure says what it waited for, after
		// letting the runs end (they report to t)
		var unblock sync.Once
		doneA, doneB := make(chan struct{}), make(chan struct{})
		fail := func(format string, args ...any) {
			t.Helper()
			unblock.Do(func() { close(release) })
			closedWithin(doneA, 2*time.Minute)
			closedWithin(doneB, 2*time.Minute)
			t.Fatalf(format, args...)
		}
		go func() {
			defer close(doneA)
			var once sync.Once
			a(scheduler.JobFunc(func(ctx context.Context) error {
				once.Do(func() { close(started) })
				<-release
				return count.job(t)(ctx)
			})).Run()
		}()
		select {
		case <-started:
		case <-doneA:
			close(doneB)
			fail("the first replica's run did not start; reported %v", handled.get())
		case <-time.After(time.Minute):
			close(doneB)
			fail("the first replica's run did not start within a minute; reported %v", handled.get())
		}
		go func() {
			defer close(doneB)
			b(count.job(t)).Run()
		}()
		select {
		case <-fired:
		case <-doneB:
			fail("the second replica returned without reading its clock; reported %v", handled.get())
		case <-time.After(time.Minute):
			fail("the second replica did not fire within a minute; reported %v", handled.get())
		}
		// B waits for A's run; meanwhile, a few seconds after B fired, the
		// ledger is pruned
		time.Sleep(2500 * time.Millisecond)
		if _, err := gormlock.Prune(dbA, window, ormlock.WithNamespace(ns)); err != nil {
			fail("Prune: %v", err)
		}
		unblock.Do(func() { close(release) })
		// A ends at once; B's wait for A's job lock is at most a minute
		if !closedWithin(doneA, time.Minute) {
			fail("the first replica's run did not end within a minute of its release; reported %v", handled.get())
		}
		if !closedWithin(doneB, 2*time.Minute) {
			fail("the second replica did not end within two minutes of the first one's release; reported %v", handled.get())
		}
		count.twice(t)
		for _, err := range handled.get() {
			t.Errorf("reported: %v", err)
		}
	})
}

// closedWithin reports whether ch is closed within d.
func closedWithin(ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// Prune's refusal rule keeps a margin of a minute past the catch-up
// window: scheduler.WithPrune refuses a window shorter than the catch-up
// window plus a minute, and takes that much.
func TestWithPruneMargin(t *testing.T) {
	db := openGorm(t, testdb.Postgres)
	b := gormsched.Backend(db, ormlock.WithCatchUp(time.Hour, ormlock.CatchUpLatest))
	for _, olderThan := range []time.Duration{time.Hour, time.Hour + 59*time.Second} {
		if _, err := scheduler.NewLocker(b, everyHour(t), scheduler.WithPrune(olderThan)); !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "margin") {
			t.Errorf("WithPrune(%v) with a catch-up window of 1h: %v, want ErrInvalidArgument naming the margin", olderThan, err)
		}
	}
	if _, err := scheduler.NewLocker(b, everyHour(t), scheduler.WithPrune(time.Hour+time.Minute)); err != nil {
		t.Errorf("WithPrune(1h1m) with a catch-up window of 1h: %v", err)
	}
}

// A catch-up pass that runs its missed slots one after the other drops a
// slot that has left the window by the time its turn comes: another
// replica may have run it meanwhile, and a Prune (window = the catch-up
// window) deleted its row, so running it would run it again.
func TestCatchUpDropsSlotsThatLeftTheWindow(t *testing.T) {
	const p, window = 2 * time.Second, 8 * time.Second
	s, err := ormlock.Every(p, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		dbA := openGorm(t, k)
		migrate(t, dbA)
		dbB := openGorm(t, k)
		job := jobName(t)
		ns := job
		opts := []ormlock.Option{ormlock.WithNamespace(ns), ormlock.WithCatchUp(window, ormlock.CatchUpAll)}
		var count slotCount
		var handled errs
		wrapper := func(db *gorm.DB, owner string) cron.JobWrapper {
			w, err := scheduler.JobWrapper(gormsched.Backend(db, append(opts, ormlock.WithOwner(owner))...), job, s, scheduler.WithErrorHandler(handled.handle))
			if err != nil {
				t.Fatal(err)
			}
			return w
		}
		// A's first missed slot runs until released; B meanwhile runs the
		// rest (A's first is held: a skip)
		started, release := make(chan time.Time, 1), make(chan struct{})
		doneA := make(chan struct{})
		var once sync.Once
		go func() {
			defer close(doneA)
			wrapper(dbA, "a")(scheduler.JobFunc(func(ctx context.Context) error {
				slot, _ := ormlock.Slot(ctx)
				once.Do(func() {
					started <- slot
					<-release
				})
				count.ran(slot)
				return nil
			})).Run()
		}()
		var first time.Time
		select {
		case first = <-started:
		case <-doneA:
			t.Fatalf("the first replica ran nothing; reported %v", handled.get())
		}
		wrapper(dbB, "b")(count.job(t)).Run()
		second := first.Add(p)
		// once the second slot has left the window, prune its row
		time.Sleep(time.Until(second.Add(window + 500*time.Millisecond)))
		if _, err := gormlock.Prune(dbB, window, ormlock.WithNamespace(ns)); err != nil {
			t.Fatalf("Prune: %v", err)
		}
		close(release)
		<-doneA
		count.twice(t)
		count.mu.Lock()
		if n := count.n[second]; n != 1 {
			t.Errorf("slot %s ran %d times, want once (by the second replica)", second.Format(time.RFC3339), n)
		}
		count.mu.Unlock()
		for _, err := range handled.get() {
			t.Errorf("reported: %v", err)
		}
	})
}
