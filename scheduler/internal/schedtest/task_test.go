package schedtest_test

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/gormsched"
)

// markHook is an ormlock.Hook that puts a mark of its own in the context
// Start returns, where a tracer puts the verb's span: a job's work whose
// context carries the mark of its own run is parented by that run's span.
type markHook struct{}

type markKey struct{}

// mark is what Start was told: the verb, and the run's job and slot.
type mark struct {
	verb, job string
	slot      time.Time
}

func (markHook) Start(ctx context.Context, e ormlock.Event) context.Context {
	return context.WithValue(ctx, markKey{}, &mark{verb: e.Verb, job: e.Job, slot: e.Slot})
}

func (markHook) End(context.Context, ormlock.Event) {}

// markOf returns the mark in ctx, or nil.
func markOf(ctx context.Context) *mark {
	m, _ := ctx.Value(markKey{}).(*mark)
	return m
}

// seen is what a job read of its context when it started.
type seen struct {
	held   bool
	slot   time.Time
	slotOK bool
	mark   *mark
}

func see(ctx context.Context) seen {
	v := seen{held: ormlock.Held(ctx), mark: markOf(ctx)}
	v.slot, v.slotOK = ormlock.Slot(ctx)
	return v
}

// A gocron job whose task is wrapped by Locker.Task runs under its run's
// lock: Held(ctx) is true, Slot(ctx) is the run's slot, the context is the
// one the run's Hook.Start returned (a tracer's span parents the job's
// work), and a lock lost mid-run (its connection killed) cancels ctx with
// a cause wrapping ErrLockLost. Without the wrapper the job's context is
// gocron's: none of that. On every backend.
func TestLockerTaskContext(t *testing.T) {
	gorm := otherBackend{"gorm", testdb.Kinds(), func(t *testing.T, k testdb.Kind) (func(...ormlock.Option) scheduler.Backend, func() int) {
		db := openGorm(t, k)
		return func(o ...ormlock.Option) scheduler.Backend { return gormsched.Backend(db, o...) }, nil
	}}
	for _, ob := range append([]otherBackend{gorm}, otherBackends...) {
		t.Run(ob.name, func(t *testing.T) {
			t.Parallel()
			forKinds(t, ob.kinds, func(t *testing.T, k testdb.Kind) { testTaskContext(t, k, ob) })
		})
	}
}

func testTaskContext(t *testing.T, k testdb.Kind, ob otherBackend) {
	db := openMigrated(t, k) // the ledger, and Holder
	backend, _ := ob.open(t, k)
	job := jobName(t)
	hourly, slot := hourlyMidway(t)
	var handled errs
	l, err := scheduler.NewLocker(backend(ormlock.WithHook(markHook{}), ormlock.WithKeepalive(250*time.Millisecond)),
		hourly, scheduler.WithErrorHandler(handled.handle))
	if err != nil {
		t.Fatal(err)
	}
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(l))
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan seen, 1)
	ended := make(chan error, 1)
	_, err = s.NewJob(gocron.DurationJob(time.Hour), gocron.NewTask(l.Task(job, func(ctx context.Context) error {
		started <- see(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(30 * time.Second):
		}
		ended <- context.Cause(ctx)
		if ormlock.Held(ctx) {
			return errors.New("Held after the loss")
		}
		return context.Cause(ctx)
	})), gocron.WithName(job), gocron.WithStartAt(gocron.WithStartImmediately()))
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	defer func() { _ = s.Shutdown() }()
	var v seen
	select {
	case v = <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not start in 30 s")
	}
	if !v.held {
		t.Error("Held(ctx) is false in the wrapped job")
	}
	if !v.slotOK || !v.slot.Equal(slot) {
		t.Errorf("Slot(ctx) = %v, %v; want %v", v.slot, v.slotOK, slot)
	}
	if v.mark == nil || v.mark.job != job || !v.mark.slot.Equal(slot) {
		t.Errorf("the job's context is not the one the run's Hook.Start returned: mark %+v", v.mark)
	}

	// lose the lock: end its connection on the server
	h, err := gormlock.Holder(db, ormlock.RunKey(job, slot))
	if err != nil || !h.Held {
		t.Fatalf("Holder: %+v, %v", h, err)
	}
	testdb.Kill(t, k, h.PID)
	select {
	case cause := <-ended:
		if !errors.Is(cause, ormlock.ErrLockLost) {
			t.Errorf("the job's context ended with cause %v, want ErrLockLost", cause)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the job's context did not end in 30 s after its lock was lost")
	}
	if err := s.Shutdown(); err != nil {
		t.Fatal(err)
	}
	lost := false
	for _, err := range handled.get() {
		lost = lost || errors.Is(err, ormlock.ErrLockLost)
	}
	if !lost {
		t.Errorf("error handler got %v, want the loss", handled.get())
	}

	// the same job on the Locker alone: gocron's context
	job2 := job + ".plain"
	s2, err := gocron.NewScheduler(gocron.WithDistributedLocker(l))
	if err != nil {
		t.Fatal(err)
	}
	plain := make(chan seen, 1)
	if _, err := s2.NewJob(gocron.DurationJob(time.Hour), gocron.NewTask(func(ctx context.Context) { plain <- see(ctx) }),
		gocron.WithName(job2), gocron.WithStartAt(gocron.WithStartImmediately())); err != nil {
		t.Fatal(err)
	}
	s2.Start()
	select {
	case v = <-plain:
	case <-time.After(30 * time.Second):
		t.Fatal("the plain job did not start in 30 s")
	}
	if err := s2.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if v.held || v.slotOK || v.mark != nil {
		t.Errorf("an unwrapped job's context is gocron's, want no lock in it: %+v", v)
	}
}

// Overlapping runs of two wrapped jobs on one Locker (each run outlasts
// the one-second period, gocron starts the next while it runs) each get
// their own run's context: its job, its slot, its hook mark, all held.
func TestLockerTaskConcurrentRuns(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := openMigrated(t, k)
		jobs := []string{jobName(t) + ".x", jobName(t) + ".y"}
		var handled errs
		l, err := scheduler.NewLocker(gormsched.Backend(db, ormlock.WithHook(markHook{})), everySecond(t),
			scheduler.WithErrorHandler(handled.handle))
		if err != nil {
			t.Fatal(err)
		}
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(l))
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		slots := map[string][]time.Time{}
		var running, most atomic.Int32
		for _, job := range jobs {
			_, err := s.NewJob(gocron.CronJob("* * * * * *", true), gocron.NewTask(l.Task(job, func(ctx context.Context) error {
				n := running.Add(1)
				defer running.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				v := see(ctx)
				switch {
				case !v.held:
					t.Errorf("%s: Held(ctx) false", job)
				case !v.slotOK:
					t.Errorf("%s: no slot in ctx", job)
				case v.mark == nil || v.mark.job != job || !v.mark.slot.Equal(v.slot):
					t.Errorf("%s, slot %v: the context of another run (mark %+v)", job, v.slot, v.mark)
				}
				mu.Lock()
				slots[job] = append(slots[job], v.slot)
				mu.Unlock()
				time.Sleep(1500 * time.Millisecond) // longer than the period
				if !ormlock.Held(ctx) {
					t.Errorf("%s, slot %v: Held(ctx) false at the end of the run", job, v.slot)
				}
				return nil
			})), gocron.WithName(job))
			if err != nil {
				t.Fatal(err)
			}
		}
		s.Start()
		time.Sleep(4 * time.Second)
		if err := s.Shutdown(); err != nil {
			t.Fatal(err)
		}
		for _, job := range jobs {
			got := slots[job]
			sort.Slice(got, func(i, j int) bool { return got[i].Before(got[j]) })
			for i := 1; i < len(got); i++ {
				if got[i].Equal(got[i-1]) {
					t.Errorf("%s: two runs saw slot %v", job, got[i])
				}
			}
			if len(got) < 2 {
				t.Errorf("%s ran %d times in 4 s", job, len(got))
			}
			runs, err := gormlock.Runs(db, job, 100)
			if err != nil {
				t.Fatal(err)
			}
			done := 0
			for _, r := range runs {
				if r.Status == "done" {
					done++
				}
			}
			if done != len(got) {
				t.Errorf("%s: %d runs in process, %d done in the ledger: %+v", job, len(got), done, runs)
			}
		}
		t.Logf("at most %d runs at once", most.Load())
		for _, err := range handled.get() {
			t.Errorf("error handler: %v", err)
		}
	})
}

// The hand-off between Lock and the task, as gocron makes it for two
// overlapping runs of one job (one job context for both): the second Lock
// does not return before the first run's task has taken its context, so
// each task gets its own run's. A run whose task never ran (gocron skipped
// it after Lock) lets the next Lock go at Unlock. A call that no Lock of
// the job preceded on its context runs nothing and says why. The job's
// error marks its own run failed.
func TestLockerTaskHandoff(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := openMigrated(t, k)
		job := jobName(t)
		base := time.Date(2035, 1, 1, 0, 0, 0, 0, time.UTC)
		var n atomic.Int64
		clock := func() time.Time { return base.Add(time.Duration(n.Add(1)-1) * time.Hour) } // a slot per Lock
		var handled errs
		l, err := scheduler.NewLocker(gormsched.Backend(db), everyHour(t), scheduler.WithClock(clock), scheduler.WithErrorHandler(handled.handle))
		if err != nil {
			t.Fatal(err)
		}
		boom := errors.New("boom")
		got := make(chan time.Time, 1)
		task := l.Task(job, func(ctx context.Context) error {
			s, _ := ormlock.Slot(ctx)
			got <- s
			if s.Equal(base) {
				return boom
			}
			return nil
		})
		gctx, cancel := context.WithCancel(context.Background()) // gocron's job context, one for all its runs
		defer cancel()

		a, err := l.Lock(gctx, job) // slot base
		if err != nil {
			t.Fatal(err)
		}
		type locked struct {
			lock gocron.Lock
			err  error
		}
		bDone := make(chan locked, 1)
		go func() {
			b, err := l.Lock(gctx, job) // slot base+1h
			bDone <- locked{b, err}
		}()
		// wait for b's claim (its row 'running'), then a moment more
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			runs, err := gormlock.Runs(db, job, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(runs) == 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the second run was not claimed in 30 s: %+v", runs)
			}
		}
		time.Sleep(200 * time.Millisecond)
		select {
		case b := <-bDone:
			t.Fatalf("the second Lock returned (%v) before the first run's task took its context", b.err)
		default:
		}
		if err := task(gctx); !errors.Is(err, boom) {
			t.Fatalf("first task: %v", err)
		}
		if s := <-got; !s.Equal(base) {
			t.Fatalf("the first task ran slot %v, want %v", s, base)
		}
		b := <-bDone
		if b.err != nil {
			t.Fatal(b.err)
		}
		if err := task(gctx); err != nil {
			t.Fatalf("second task: %v", err)
		}
		if s := <-got; !s.Equal(base.Add(time.Hour)) {
			t.Fatalf("the second task ran slot %v, want %v", s, base.Add(time.Hour))
		}
		l.JobFailed(job, boom) // RecordFailures' listener, after the wrapper saw it: nothing more to do
		if err := a.Unlock(gctx); !errors.Is(err, boom) {
			t.Fatalf("first Unlock: %v, want the job's error", err)
		}
		if err := b.lock.Unlock(gctx); err != nil {
			t.Fatal(err)
		}

		// a run whose task gocron never called: the next Lock is not held up
		c, err := l.Lock(gctx, job)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Unlock(gctx); err != nil {
			t.Fatal(err)
		}
		d, err := l.Lock(gctx, job)
		if err != nil {
			t.Fatal(err)
		}
		// a task on another context than its Lock's
		if err := task(context.Background()); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Errorf("a task on a context no Lock had: %v, want ErrInvalidArgument", err)
		}
		if err := task(gctx); err != nil {
			t.Fatal(err)
		}
		<-got
		if err := d.Unlock(gctx); err != nil {
			t.Fatal(err)
		}
		select {
		case s := <-got:
			t.Errorf("a refused task ran (slot %v)", s)
		default:
		}

		// a panic goes on, and marks its run failed
		e, err := l.Lock(gctx, job)
		if err != nil {
			t.Fatal(err)
		}
		func() {
			defer func() {
				if p := recover(); p != "kaboom" {
					t.Errorf("recovered %v, want the job's panic", p)
				}
			}()
			_ = l.Task(job, func(context.Context) error { panic("kaboom") })(gctx)
		}()
		if err := e.Unlock(gctx); err == nil || !strings.Contains(err.Error(), "panic: kaboom") {
			t.Errorf("Unlock after a panic: %v", err)
		}

		runs, err := gormlock.Runs(db, job, 10)
		if err != nil {
			t.Fatal(err)
		}
		status := map[time.Time]string{}
		for _, r := range runs {
			status[r.Slot.UTC()] = string(r.Status) + ":" + r.Error
		}
		want := map[time.Time]string{
			base: "failed:boom", base.Add(time.Hour): "done:", base.Add(2 * time.Hour): "done:", base.Add(3 * time.Hour): "done:",
			base.Add(4 * time.Hour): "failed:panic: kaboom",
		}
		for s, w := range want {
			if status[s] != w {
				t.Errorf("slot %v: %q, want %q", s, status[s], w)
			}
		}
		var other []string
		for _, err := range handled.get() {
			if !errors.Is(err, boom) && !errors.Is(err, ormlock.ErrInvalidArgument) && !strings.Contains(err.Error(), "kaboom") {
				other = append(other, err.Error())
			}
		}
		if len(other) > 0 {
			t.Errorf("error handler: %s", strings.Join(other, "; "))
		}
	})
}
