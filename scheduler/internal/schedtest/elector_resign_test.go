package schedtest_test

import (
	"errors"
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

// A gocron service of three replicas, each an Elector running a job every
// second: a and b campaign, c follows (WithoutCampaign). a leads from
// start-up; asked to step down (gormlock.Act with ormlock.Resign), it
// stops leading within one keepalive interval and a margin, b takes over
// and runs the job, and the error handler hears who asked; when b closes,
// nobody leads until a's cooldown has passed (c never campaigns), then a
// leads again. c never runs the job, and no two runs overlap.
func TestElectorResign(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		const keepalive = 200 * time.Millisecond
		const cooldown = 2 * time.Second
		const margin = 2 * time.Second
		key := "resign:" + jobName(t)
		job := jobName(t)
		tbl := testdb.Table(t, k, "c")
		opts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithKeepalive(keepalive)}
		db := openGorm(t, k)
		if err := gormlock.Migrate(db, opts...); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		var mu sync.Mutex
		var reported []error
		type run struct {
			replica string
			at      time.Time
		}
		var runs []run
		var tl tally
		handle := func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }
		es := make([]*scheduler.Elector, 3)
		var scheds []gocron.Scheduler
		for i := range es {
			eopts := []scheduler.Option{scheduler.WithRetry(100 * time.Millisecond), scheduler.WithErrorHandler(handle)}
			if i == 2 {
				eopts = append(eopts, scheduler.WithoutCampaign())
			}
			e, err := scheduler.NewElector(gormsched.Backend(openGorm(t, k), opts...), key, eopts...)
			if err != nil {
				t.Fatal(err)
			}
			es[i] = e
			replica := string(rune('a' + i))
			s, err := gocron.NewScheduler(gocron.WithDistributedElector(e))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.NewJob(gocron.CronJob("* * * * * *", true), gocron.NewTask(func() {
				tl.enter(replica)
				defer tl.exit()
				mu.Lock()
				runs = append(runs, run{replica, time.Now()})
				mu.Unlock()
				time.Sleep(50 * time.Millisecond)
			}), gocron.WithName(job)); err != nil {
				t.Fatal(err)
			}
			s.Start()
			scheds = append(scheds, s)
		}
		all := append([]*scheduler.Elector(nil), es...)
		t.Cleanup(func() { // before the pools' leak checks
			for _, s := range scheds {
				_ = s.Shutdown()
			}
			for _, e := range all {
				_ = e.Close()
			}
		})
		if l := waitOneLeader(t, es, 5*time.Second); l != 0 {
			t.Fatalf("elector %d leads at start-up, want a", l)
		}
		time.Sleep(1200 * time.Millisecond) // a runs the job

		a := ormlock.Resign(key).By("op", "move")
		a.Cooldown = cooldown
		if _, err := gormlock.Act(db, a, opts...); err != nil {
			t.Fatalf("Act(Resign): %v", err)
		}
		asked := time.Now()
		for es[0].IsLeader(t.Context()) == nil {
			if time.Since(asked) > keepalive+margin {
				t.Fatalf("a still leads %v after it was asked to resign", time.Since(asked))
			}
			time.Sleep(10 * time.Millisecond)
		}
		stepped := time.Now()
		if l := waitOneLeader(t, es, keepalive+margin); l != 1 {
			t.Fatalf("elector %d leads after a's resign, want b", l)
		}
		t.Logf("a stepped down %v after the action, b leads %v after it", stepped.Sub(asked), time.Since(asked))
		time.Sleep(1200 * time.Millisecond) // b runs the job
		if err := es[1].Close(); err != nil {
			t.Fatal(err)
		}
		es[1] = nil
		if l := waitOneLeader(t, es, cooldown+margin); l != 0 || time.Since(asked) < cooldown-keepalive {
			t.Fatalf("elector %d leads %v after the resign, want a after its cooldown %v", l, time.Since(asked), cooldown)
		}
		back := time.Now()
		time.Sleep(1200 * time.Millisecond) // a runs the job again
		for _, s := range scheds {
			if err := s.Shutdown(); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
		}

		mu.Lock()
		defer mu.Unlock()
		var byB, aAgain int
		for _, r := range runs {
			switch {
			case r.replica == "c":
				t.Errorf("the follower ran the job at %v", r.at)
			case r.replica == "a" && r.at.After(stepped.Add(100*time.Millisecond)) && r.at.Before(asked.Add(cooldown-keepalive)):
				// (a run gocron began as a still led may start a moment
				// later; once the cooldown ends, a may lead and run
				// before this test's poll sees it lead: back)
				t.Errorf("a ran the job %v after it stepped down, before its cooldown ended", r.at.Sub(stepped))
			case r.replica == "b":
				byB++
			case r.replica == "a" && r.at.After(back):
				aAgain++
			}
		}
		if byB == 0 || aAgain == 0 {
			t.Errorf("runs by replica: %v; want b's while it led and a's after its cooldown", runs)
		}
		if _, maxHold := tl.snapshot(); maxHold > 1 {
			t.Errorf("%d runs at once", maxHold)
		}
		if len(reported) == 0 || !errors.Is(reported[0], ormlock.ErrLockLost) || !strings.Contains(reported[0].Error(), "asked to resign by op: move") {
			t.Errorf("error handler heard %v, want the resign", reported)
		}
	})
}
