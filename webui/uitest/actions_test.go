package uitest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/go-co-op/gocron/v2"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/sqlsched"
	"github.com/ormlock/ormlock/sqllock"
	"github.com/ormlock/ormlock/webui"
)

// The operators' actions in the view, against three running replicas of
// a gocron service (scheduler.NewLocker with its Task, a job every second)
// and three Leads of one key, on PostgreSQL and MariaDB: an operator
// pauses the job from its page and every replica skips the next firings
// (each slot 'skipped' with the operator's name and reason); resumes it
// and no paused slot runs; reruns a failed slot from the runs table and it
// runs once; asks the leader to resign from the overview and another
// replica leads. Each action goes through its confirmation page.

// slotRuns records the job's runs per slot, in process.
type slotRuns struct {
	mu   sync.Mutex
	runs map[time.Time][]string
}

func (s *slotRuns) ran(replica string, slot time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runs == nil {
		s.runs = map[time.Time][]string{}
	}
	s.runs[slot.UTC()] = append(s.runs[slot.UTC()], replica)
}

func (s *slotRuns) of(slot time.Time) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.runs[slot.UTC()]...)
}

func (s *slotRuns) slots() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []time.Time
	for t := range s.runs {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// firingLocker records, per replica, the outcome of each of the
// scheduler Locker's Locks (each firing asks one): granted or refused,
// and refused with ormlock.ErrPaused (the replica that claimed a paused
// slot and recorded it 'skipped'; the others found its lock held).
type firingLocker struct {
	*scheduler.Locker
	replica string
	log     *firings
}

type firing struct {
	at      time.Time
	granted bool
	paused  bool
}

type firings struct {
	mu sync.Mutex
	by map[string][]firing
}

func (f *firings) add(replica string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.by == nil {
		f.by = map[string][]firing{}
	}
	f.by[replica] = append(f.by[replica], firing{at: time.Now(), granted: err == nil, paused: errors.Is(err, ormlock.ErrPaused)})
}

// within counts replica's firings between from and to: granted, refused,
// and refused because the job was paused.
func (f *firings) within(replica string, from, to time.Time) (granted, refused, paused int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, x := range f.by[replica] {
		switch {
		case x.at.Before(from) || x.at.After(to):
		case x.granted:
			granted++
		case x.paused:
			refused++
			paused++
		default:
			refused++
		}
	}
	return granted, refused, paused
}

func (p firingLocker) Lock(ctx context.Context, job string) (gocron.Lock, error) {
	l, err := p.Locker.Lock(ctx, job)
	p.log.add(p.replica, err)
	return l, err
}

// counts counts by replica.
type counts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counts) add(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[k]++
}

func (c *counts) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[k]
}

var errSettlement = errors.New("settlement failed: upstream refused the batch")

func TestBrowserActions(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
		t.Run(string(k), func(t *testing.T) { testActions(t, k) })
	}
}

func testActions(t *testing.T, k testdb.Kind) {
	ctx := context.Background()
	admin := testdb.Open(t, k)
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, admin) })
	table := testdb.Table(t, k, "uiact")
	opts := []ormlock.Option{ormlock.WithLedgerTable(table)}
	if err := sqllock.Migrate(ctx, admin, opts...); err != nil {
		t.Fatal(err)
	}
	every, err := ormlock.Every(time.Second, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	job := "settlement-" + string(k)
	failed := time.Now().UTC().Truncate(time.Second).Add(-30 * time.Second)
	err = sqllock.RunOnce(ctx, admin, job, failed, func(context.Context, *sql.Tx) error { return errSettlement }, append(opts, ormlock.WithClaim())...)
	if !errors.Is(err, errSettlement) {
		t.Fatalf("the failing run: %v", err)
	}

	// three replicas of the service: a gocron scheduler each, on a pool
	// of its own, and a Lead of the same key
	var runs slotRuns
	var fired firings
	var handled []error
	var hmu sync.Mutex
	leaderKey := ormlock.Name("settlement-leader-" + string(k))
	var leading sync.Map // replica -> true while it leads
	var resigned counts  // replica -> terms ended by a resign request
	lctx, stopLeads := context.WithCancel(ctx)
	var leads sync.WaitGroup
	var scheds []gocron.Scheduler
	stopAll := func() {
		for _, s := range scheds {
			if err := s.Shutdown(); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
		}
		scheds = nil
		stopLeads()
		leads.Wait()
	}
	defer stopAll()
	for i := range 3 {
		replica := fmt.Sprintf("replica-%c", 'a'+i)
		db := testdb.Open(t, k)
		t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
		b := sqlsched.Backend(db, append(opts, ormlock.WithOwner(replica))...)
		l, err := scheduler.NewLocker(b, every, scheduler.WithErrorHandler(func(err error) {
			hmu.Lock()
			defer hmu.Unlock()
			handled = append(handled, err)
		}))
		if err != nil {
			t.Fatal(err)
		}
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(firingLocker{l, replica, &fired}), gocron.WithGlobalJobOptions(l.RecordFailures()))
		if err != nil {
			t.Fatal(err)
		}
		task := gocron.NewTask(l.Task(job, func(ctx context.Context) error {
			slot, _ := ormlock.Slot(ctx)
			runs.ran(replica, slot)
			return nil
		}))
		if _, err := s.NewJob(gocron.CronJob("* * * * * *", true), task, gocron.WithName(job)); err != nil {
			t.Fatal(err)
		}
		s.Start()
		scheds = append(scheds, s)
		leads.Add(1)
		go func() {
			defer leads.Done()
			_ = sqllock.Lead(lctx, db, leaderKey, func(ctx context.Context) error {
				leading.Store(replica, true)
				defer leading.Delete(replica)
				<-ctx.Done()
				if cause := context.Cause(ctx); errors.Is(cause, ormlock.ErrLockLost) && strings.Contains(cause.Error(), "resign") {
					resigned.add(replica)
				}
				return ctx.Err()
			}, append(opts, ormlock.WithOwner(replica), ormlock.WithKeepalive(time.Second))...)
		}()
	}

	h, err := webui.Handler(admin, webui.WithLedgerTable(table), webui.WithSchedule(job, every), webui.WithLeaders(leaderKey),
		webui.WithActions(func(*http.Request) (string, error) { return "alice", nil }))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	bctx := browser(t)
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		tctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(tctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	eval := func(expr string) any {
		t.Helper()
		tctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		v, err := chromedp.Run(tctx, chromedp.Evaluate[any](expr))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return v
	}
	text := func(sel string) string {
		t.Helper()
		s, _ := eval(`(document.querySelector(` + jsString(sel) + `) || {}).innerText || ""`).(string)
		return s
	}
	visible := func(sel string) chromedp.Action[chromedp.Void] { return chromedp.WaitVisible(chromedp.CSS(sel)) }
	jobPage := srv.URL + "/job?name=" + job + "&refresh=0"
	// confirm fills the confirmation page's reason, posts its form and
	// waits for the outcome
	confirm := func(what, reason string) {
		t.Helper()
		do(what+": the confirmation page", visible("#act-form"))
		if got := text("#act"); !strings.Contains(got, "ormlock's own tables") {
			t.Errorf("%s: the confirmation page does not say what the action never does: %s", what, got)
		}
		do(what+": the reason", chromedp.SendKeys(chromedp.CSS("#reason"), reason))
		if what == "pause" || what == "resign" {
			screenshot(t, bctx, string(k)+"-confirm-"+what)
		}
		do(what+": confirm", chromedp.Click(chromedp.CSS("#confirm")), visible("#outcome"))
		t.Logf("%s: %s", what, text("#outcome"))
	}

	time.Sleep(2 * time.Second) // the job runs
	do("open the job's page", chromedp.Navigate(jobPage), visible("#pause"))
	do("pause", chromedp.Click(chromedp.CSS("#pause")))
	confirm("pause", "incident 42")
	pausedAt := time.Now()
	time.Sleep(3500 * time.Millisecond)
	do("the paused job's page", chromedp.Navigate(jobPage), visible("#paused"))
	if got := text("#paused"); !strings.Contains(got, "alice: incident 42") {
		t.Errorf("the paused banner reads %q", got)
	}
	if n, _ := eval(`document.querySelectorAll("#runs tr.run.skipped").length`).(float64); n < 2 {
		t.Errorf("%v skipped slots on the paused job's page, want at least 2", n)
	}
	screenshot(t, bctx, string(k)+"-paused")
	do("resume", chromedp.Click(chromedp.CSS("#resume")))
	confirm("resume", "incident 42 over")
	resumeAt := time.Now()
	row := fmt.Sprintf("#s%d", failed.Unix())
	do("the failed slot's row", chromedp.Navigate(jobPage), visible(row+" a.rerun"))
	do("rerun", chromedp.Click(chromedp.CSS(row+" a.rerun")))
	confirm("rerun", "upstream back")
	time.Sleep(3 * time.Second)

	// the leader resigns from the overview
	first := ""
	deadline := time.Now().Add(15 * time.Second)
	for first == "" && time.Now().Before(deadline) {
		leading.Range(func(k, _ any) bool { first = k.(string); return false })
		time.Sleep(100 * time.Millisecond)
	}
	if first == "" {
		t.Fatal("no replica leads")
	}
	do("the overview", chromedp.Navigate(srv.URL+"/?refresh=0"), visible("#leaders a.resign"))
	if got := text("#leaders"); !strings.Contains(got, first) {
		t.Errorf("the leaders table does not name %s: %s", first, got)
	}
	do("resign", chromedp.Click(chromedp.CSS("#leaders a.resign")))
	confirm("resign", "move off the sick host")
	asked := time.Now()
	next := ""
	for next == "" && time.Since(asked) < 20*time.Second {
		leading.Range(func(k, _ any) bool {
			if k.(string) != first {
				next = k.(string)
			}
			return next == ""
		})
		time.Sleep(100 * time.Millisecond)
	}
	// the documented bound: the leader sees the request within one
	// keepalive interval (1s here) and another campaigner, waiting on the
	// server for the lock, takes over at once; 5s leaves room for a loaded
	// machine
	took := time.Since(asked)
	switch {
	case next == "":
		t.Errorf("no other replica leads within 20s of the resign (%s asked)", first)
	case took > 5*time.Second:
		t.Errorf("%s led only %v after %s was asked to resign, beyond the keepalive interval's bound", next, took.Round(100*time.Millisecond), first)
	default:
		t.Logf("%s resigned; %s leads after %v", first, next, took.Round(100*time.Millisecond))
	}
	if resigned.get(first) != 1 {
		t.Errorf("%s's term ended %d times with a cause saying it was asked to resign, want once", first, resigned.get(first))
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		do("the overview after the resign", chromedp.Navigate(srv.URL+"/?refresh=0"), visible("#leaders"))
		if strings.Contains(text("#leaders"), next) {
			break
		}
	}
	if got := text("#leaders"); next != "" && !strings.Contains(got, next) {
		t.Errorf("the leaders table does not show %s leading: %s", next, got)
	}
	screenshot(t, bctx, string(k)+"-resigned")
	stopAll()

	// what ran: no paused slot, the rerun slot once, every slot once
	var pausedSlots []time.Time
	for s := pausedAt.UTC().Truncate(time.Second).Add(2 * time.Second); !s.Add(time.Second).After(resumeAt); s = s.Add(time.Second) {
		pausedSlots = append(pausedSlots, s)
	}
	if len(pausedSlots) < 2 {
		t.Fatalf("only %d slots fell wholly within the pause: the machine is too slow for this test", len(pausedSlots))
	}
	rows, err := sqllock.Runs(ctx, admin, job, 1000, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ledger := map[time.Time]ormlock.Run{}
	for _, r := range rows {
		ledger[r.Slot.UTC()] = r
	}
	for _, s := range pausedSlots {
		if who := runs.of(s); len(who) > 0 {
			t.Errorf("paused slot %s ran on %v", s.Format(time.RFC3339), who)
		}
		if r := ledger[s]; r.Status != "skipped" || !strings.Contains(r.Error, "alice") || !strings.Contains(r.Error, "incident 42") {
			t.Errorf("paused slot %s: status %q, error %q; want 'skipped' by alice for incident 42", s.Format(time.RFC3339), r.Status, r.Error)
		}
	}
	// while the job was paused, every replica's every firing was refused
	// (the replica that claimed the slot with ErrPaused, the others by its
	// lock), and none granted
	pausedFirings := 0
	for i := range 3 {
		replica := fmt.Sprintf("replica-%c", 'a'+i)
		granted, refused, p := fired.within(replica, pausedAt.Add(500*time.Millisecond), resumeAt)
		if granted > 0 || refused == 0 {
			t.Errorf("%s, while the job was paused: %d firings granted, %d refused; want none granted", replica, granted, refused)
		}
		pausedFirings += p
	}
	if pausedFirings < len(pausedSlots) {
		t.Errorf("%d firings refused with ErrPaused for %d paused slots, want one each", pausedFirings, len(pausedSlots))
	}
	if who := runs.of(failed); len(who) != 1 {
		t.Errorf("the failed slot asked to rerun ran %d times (%v), want once", len(who), who)
	}
	if r := ledger[failed]; r.Status != "done" {
		t.Errorf("the rerun slot: status %q (error %q), want done", r.Status, r.Error)
	}
	after := 0
	for _, s := range runs.slots() {
		if who := runs.of(s); len(who) > 1 {
			t.Errorf("slot %s ran %d times: %v", s.Format(time.RFC3339), len(who), who)
		}
		if s.After(resumeAt.Add(time.Second)) {
			after++
		}
	}
	if after < 2 {
		t.Errorf("%d slots ran after the resume, want at least 2", after)
	}
	hmu.Lock()
	for _, err := range handled {
		t.Errorf("error handler: %v", err)
	}
	hmu.Unlock()
	// the actions log, as the job's page shows it
	do("the job's actions log", chromedp.Navigate(jobPage), visible("#action-log"))
	log := text("#action-log")
	for _, want := range []string{"pause", "resume", "rerun", "alice", "incident 42", "upstream back"} {
		if !strings.Contains(log, want) {
			t.Errorf("the actions log lacks %q: %s", want, log)
		}
	}
	screenshot(t, bctx, string(k)+"-actions")
}
