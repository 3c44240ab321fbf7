package schedtest_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/gormsched"
)

// fire is one gocron firing as the executor makes it: Lock, the job, Unlock.
func fire(t *testing.T, l *scheduler.Locker, job string) error {
	t.Helper()
	lk, err := l.Lock(context.Background(), job)
	if err != nil {
		return err
	}
	return lk.Unlock(context.Background())
}

// A job whose trigger fires more often than the schedule its Locker maps it
// by is reported — naming the job and the schedule — at the latest on its
// second repeat within one slot, and a trigger twice as dense as the
// schedule (one repeat per slot) at the first repeat of its second slot;
// the skips themselves stay silent.
func TestLockerReportsDenseTrigger(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := openGorm(t, k)
		migrate(t, db)
		daily, err := ormlock.Cron("0 0 * * *", time.UTC)
		if err != nil {
			t.Fatal(err)
		}
		var now atomic.Int64
		now.Store(time.Date(2031, 5, 7, 10, 0, 0, 0, time.UTC).UnixNano())
		var handled errs
		l, err := scheduler.NewLocker(gormsched.Backend(db), daily, scheduler.WithErrorHandler(handled.handle),
			scheduler.WithClock(func() time.Time { return time.Unix(0, now.Load()) }))
		if err != nil {
			t.Fatal(err)
		}
		job := jobName(t)
		if err := fire(t, l, job); err != nil {
			t.Fatal(err)
		}
		now.Add(int64(2 * time.Second))
		if err := fire(t, l, job); !errors.Is(err, ormlock.ErrAlreadyDone) {
			t.Fatalf("second firing in the slot: %v, want ErrAlreadyDone", err)
		}
		if got := handled.get(); len(got) != 0 {
			t.Fatalf("one repeat reported already: %v", got)
		}
		now.Add(int64(2 * time.Second))
		_ = fire(t, l, job)
		got := handled.get()
		if len(got) != 1 || !strings.Contains(got[0].Error(), job) || !strings.Contains(got[0].Error(), "0 0 * * * in UTC") ||
			!strings.Contains(got[0].Error(), "WithJobSchedule") {
			t.Fatalf("reported %v, want one error naming the job, the schedule and WithJobSchedule", got)
		}
		_ = fire(t, l, job) // once per slot
		if n := len(handled.get()); n != 1 {
			t.Fatalf("%d reports in one slot", n)
		}

		// twice as dense: one repeat per slot, reported in the second
		hourly, err := ormlock.Every(time.Hour, nil)
		if err != nil {
			t.Fatal(err)
		}
		var handled2 errs
		l2, err := scheduler.NewLocker(gormsched.Backend(db), hourly, scheduler.WithErrorHandler(handled2.handle),
			scheduler.WithClock(func() time.Time { return time.Unix(0, now.Load()) }))
		if err != nil {
			t.Fatal(err)
		}
		job2 := job + "-half"
		for i := range 4 { // :00 and :30 of two hours
			_ = fire(t, l2, job2)
			if n := len(handled2.get()); (i < 3 && n != 0) || (i == 3 && n != 1) {
				t.Fatalf("after firing %d: %d reports (%v)", i+1, n, handled2.get())
			}
			now.Add(int64(30 * time.Minute))
		}
	})
}

// WithStrict: a Locker without a default schedule refuses, through Lock and
// the error handler, a job it has no WithJobSchedule for, and runs those it
// has; without WithStrict a nil default is refused at construction. Tested
// with a real gocron scheduler.
func TestLockerStrict(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := openGorm(t, k)
		migrate(t, db)
		if _, err := scheduler.NewLocker(gormsched.Backend(db), nil); !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "WithStrict") {
			t.Fatalf("nil default without WithStrict: %v", err)
		}
		known, unknown := jobName(t)+"-known", jobName(t)+"-unknown"
		// a JobWrapper takes a nil schedule from WithJobSchedule, and
		// refuses a job with neither
		if _, err := scheduler.JobWrapper(gormsched.Backend(db), unknown, nil, scheduler.WithStrict()); !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "WithJobSchedule") {
			t.Fatalf("JobWrapper without a schedule: %v", err)
		}
		if _, err := scheduler.JobWrapper(gormsched.Backend(db), known, nil, scheduler.WithStrict(), scheduler.WithJobSchedule(known, everySecond(t))); err != nil {
			t.Fatalf("JobWrapper with WithJobSchedule: %v", err)
		}
		var handled errs
		l, err := scheduler.NewLocker(gormsched.Backend(db), nil, scheduler.WithStrict(),
			scheduler.WithJobSchedule(known, everySecond(t)), scheduler.WithErrorHandler(handled.handle))
		if err != nil {
			t.Fatal(err)
		}
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(l))
		if err != nil {
			t.Fatal(err)
		}
		ran := make(chan string, 4)
		for _, name := range []string{known, unknown} {
			if _, err := s.NewJob(gocron.DurationJob(time.Hour), gocron.NewTask(func() { ran <- name }), gocron.WithName(name),
				gocron.WithStartAt(gocron.WithStartImmediately())); err != nil {
				t.Fatal(err)
			}
		}
		s.Start()
		if got := <-ran; got != known {
			t.Fatalf("ran %q", got)
		}
		for deadline := time.Now().Add(10 * time.Second); len(handled.get()) == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		}
		if err := s.Shutdown(); err != nil {
			t.Fatal(err)
		}
		got := handled.get()
		if len(got) != 1 || !errors.Is(got[0], ormlock.ErrInvalidArgument) || !strings.Contains(got[0].Error(), unknown) {
			t.Fatalf("reported %v, want the unknown job refused", got)
		}
		if len(ran) != 0 {
			t.Fatalf("the job without a schedule ran")
		}
	})
}
