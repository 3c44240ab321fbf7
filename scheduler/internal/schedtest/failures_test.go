package schedtest_test

import (
	"bytes"
	"context"
	"errors"
	"log"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/gormsched"
)

// With Locker.RecordFailures wired into a real gocron scheduler, a job that
// returns an error, then one that panics, leaves its slot 'failed' with the
// error's text each time, and a later firing in the same slot runs it again
// until it succeeds ('done').
func TestLockerRecordsFailedRuns(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := openMigrated(t, k)
		job := jobName(t)
		slot := time.Date(2031, 5, 7, 10, 0, 0, 0, time.UTC)
		// every firing maps to one slot: the retries are of that slot
		var mu sync.Mutex
		var seen []string // the ledger row when each failure was reported
		l, err := scheduler.NewLocker(gormsched.Backend(db), everySecond(t),
			scheduler.WithClock(func() time.Time { return slot }),
			scheduler.WithErrorHandler(func(err error) {
				if errors.Is(err, ormlock.ErrAlreadyDone) || strings.Contains(err.Error(), "fired") {
					return // the dense-trigger report: every firing here is in one slot
				}
				// called within Unlock, after the row was written; gocron's
				// singleton mode holds the next firing until Unlock returns
				rs, rerr := gormlock.Runs(db, job, 5)
				mu.Lock()
				defer mu.Unlock()
				if rerr != nil || len(rs) != 1 {
					seen = append(seen, "runs: "+errors.Join(rerr).Error())
					return
				}
				seen = append(seen, string(rs[0].Status)+": "+rs[0].Error)
			}))
		if err != nil {
			t.Fatal(err)
		}
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(l), gocron.WithGlobalJobOptions(l.RecordFailures()))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		attempt := 0
		if _, err := s.NewJob(gocron.DurationJob(50*time.Millisecond), gocron.NewTask(func() error {
			attempt++
			switch attempt {
			case 1:
				return errors.New("disk full")
			case 2:
				panic("kaboom")
			case 3:
				close(done)
			}
			return nil
		}), gocron.WithName(job), gocron.WithSingletonMode(gocron.LimitModeReschedule)); err != nil {
			t.Fatal(err)
		}
		s.Start()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the job did not succeed in 30 s")
		}
		if err := s.Shutdown(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		got := strings.Join(seen, " | ")
		mu.Unlock()
		if want := "failed: disk full | failed: panic: kaboom"; got != want {
			t.Errorf("ledger at each failure: %q, want %q", got, want)
		}
		rs, err := gormlock.Runs(db, job, 5)
		if err != nil || len(rs) != 1 || rs[0].Status != "done" || !rs[0].Slot.Equal(slot) {
			t.Fatalf("ledger after the retries: %+v, %v", rs, err)
		}
	})
}

// TestDefaultErrorHandlerEscapes: without WithErrorHandler or
// WithCronLogger, a failed run is logged through slog.Default() with a fixed
// message and the error as a quoted attribute, so a job's error text cannot
// forge a second log line or put raw control characters in the log.
func TestDefaultErrorHandlerEscapes(t *testing.T) {
	k := testdb.MariaDB
	db := openMigrated(t, k)
	var buf bytes.Buffer
	flags, out := log.Flags(), log.Writer()
	log.SetOutput(&buf) // slog.Default()'s handler writes through package log
	t.Cleanup(func() { log.SetOutput(out); log.SetFlags(flags) })
	slot := time.Date(2031, 5, 7, 10, 0, 0, 0, time.UTC)
	w, err := scheduler.JobWrapper(gormsched.Backend(db, ormlock.WithOwner("w")), jobName(t), everySecond(t),
		scheduler.WithClock(func() time.Time { return slot }))
	if err != nil {
		t.Fatal(err)
	}
	forged := errors.New("boom\n2031/05/07 10:00:00 INFO all good \x1b[2J\r")
	w(scheduler.JobFunc(func(context.Context) error { return forged })).Run()
	got := strings.TrimSuffix(buf.String(), "\n")
	if strings.ContainsAny(got, "\n\r\x1b") || !strings.Contains(got, "ormlock: scheduler error") || !strings.Contains(got, `boom\n2031`) {
		t.Fatalf("logged %q: want one line, the error escaped in an attribute", buf.String())
	}
}
