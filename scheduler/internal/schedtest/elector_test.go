package schedtest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/gormsched"
)

// leaders returns the indexes of the electors that lead.
func leaders(es []*scheduler.Elector) []int {
	var out []int
	for i, e := range es {
		if e == nil {
			continue
		}
		if err := e.IsLeader(context.Background()); err == nil {
			out = append(out, i)
		} else if !errors.Is(err, scheduler.ErrNotLeader) {
			panic(err)
		}
	}
	return out
}

// waitOneLeader polls until exactly one elector leads and returns it.
func waitOneLeader(t *testing.T, es []*scheduler.Elector, within time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		l := leaders(es)
		if len(l) > 1 {
			t.Fatalf("%d leaders at once: %v", len(l), l)
		}
		if len(l) == 1 {
			return l[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader within %v", within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Three electors on their own pools: exactly one leads at any time; when
// the leader closes another takes over, and when it closes the last one
// does; gocron schedulers using them run each second's job on the leader
// only.
func TestElector(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		key := "leader:" + jobName(t)
		job := jobName(t)
		var handled errs
		var tl tally
		es := make([]*scheduler.Elector, 3)
		var scheds []gocron.Scheduler
		for i := range es {
			db := openGorm(t, k)
			e, err := scheduler.NewElector(gormsched.Backend(db), key,
				scheduler.WithRetry(100*time.Millisecond), scheduler.WithErrorHandler(handled.handle))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = e.Close() })
			es[i] = e
			if i == 0 && e.IsLeader(context.Background()) != nil {
				t.Fatal("the first elector does not lead when NewElector returns")
			}
			replica := fmt.Sprintf("replica-%c", 'a'+i)
			s, err := gocron.NewScheduler(gocron.WithDistributedElector(e))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.NewJob(gocron.CronJob("* * * * * *", true), gocron.NewTask(func() {
				tl.enter(replica)
				defer tl.exit()
				time.Sleep(50 * time.Millisecond)
			}), gocron.WithName(job)); err != nil {
				t.Fatal(err)
			}
			s.Start()
			scheds = append(scheds, s)
		}
		lead := waitOneLeader(t, es, time.Second)
		if lead != 0 {
			t.Fatalf("elector %d leads, want the first", lead)
		}
		// exactly one leader, sampled while the schedulers run
		for range 40 {
			if l := leaders(es); len(l) != 1 {
				t.Fatalf("leaders: %v", l)
			}
			time.Sleep(50 * time.Millisecond)
		}
		start := time.Now()
		if err := es[lead].Close(); err != nil {
			t.Fatal(err)
		}
		es[lead] = nil
		lead = waitOneLeader(t, es, 3*time.Second)
		t.Logf("failover to elector %d after %v", lead, time.Since(start))
		time.Sleep(1500 * time.Millisecond)
		for _, s := range scheds {
			if err := s.Shutdown(); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
		}
		runs, maxHold := tl.snapshot()
		if maxHold > 1 {
			t.Errorf("%d runs at once", maxHold)
		}
		if len(runs) < 2 {
			t.Errorf("only %d runs", len(runs))
		}
		t.Logf("runs by replica: %v", runs)
		for _, e := range es {
			if e != nil {
				_ = e.Close()
			}
		}
		if l := leaders(es); len(l) != 0 {
			t.Errorf("leaders after Close: %v", l)
		}
		for _, err := range handled.get() {
			t.Errorf("error handler: %v", err)
		}
	})
}

// A leader whose lock connection is killed gives up the lead within two
// keepalive intervals, reports the loss, and another elector takes over.
func TestElectorLockLost(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		key := "leader:" + jobName(t)
		var handled errs
		es := make([]*scheduler.Elector, 2)
		for i := range es {
			db := openGorm(t, k)
			e, err := scheduler.NewElector(gormsched.Backend(db, ormlock.WithKeepalive(100*time.Millisecond)), key,
				scheduler.WithRetry(100*time.Millisecond), scheduler.WithErrorHandler(handled.handle))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = e.Close() })
			es[i] = e
		}
		if lead := waitOneLeader(t, es, time.Second); lead != 0 {
			t.Fatalf("elector %d leads, want the first", lead)
		}
		db := openGorm(t, k)
		h, err := gormHolder(db, key)
		if err != nil {
			t.Fatal(err)
		}
		testdb.Kill(t, k, h)
		deadline := time.Now().Add(3 * time.Second)
		for leaders(es) == nil || leaders(es)[0] != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("leaders after the kill: %v", leaders(es))
			}
			time.Sleep(20 * time.Millisecond)
		}
		got := handled.get()
		if len(got) == 0 || !errors.Is(got[0], ormlock.ErrLockLost) {
			t.Fatalf("error handler got %v, want the lost lock", got)
		}
		t.Logf("reported: %v", got[0])
		for _, e := range es {
			_ = e.Close()
		}
	})
}

// NewElector on a free key returns leading, every time: the lead it won
// is recorded before it returns (a hundred electors in a row, each closed
// before the next).
func TestElectorLeadsOnReturn(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		b := gormsched.Backend(openGorm(t, k))
		for i := range 100 {
			e, err := scheduler.NewElector(b, fmt.Sprintf("first-%s-%d", jobName(t), i))
			if err != nil {
				t.Fatal(err)
			}
			err = e.IsLeader(context.Background())
			_ = e.Close()
			if err != nil {
				t.Fatalf("elector %d on a free key: IsLeader = %v when NewElector returned", i, err)
			}
		}
	})
}
