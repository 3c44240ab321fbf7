// Package uitest drives headless Chromium over the web view (package
// webui) on real servers: it fills a ledger (done, failed, running and
// missed slots, hostile job names), holds a lock, elects a leader, serves
// the view and loads each page, checks what a reader sees and saves
// screenshots; and it acts from the view (actions_test.go) against three
// replicas of a gocron service and three Leads. It is a module of its own,
// so that the library's go.mod names no browser driver nor scheduler, and
// `make test` does not run it: `make ui-test` does (it installs Debian's
// chromium when missing).
//
// Screenshots go to $UITEST_SCREENSHOTS (make ui-test: webui/uitest/screenshots),
// else to a temporary directory, named <server>-<page>.png.
package uitest_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/ledgertest"
	"github.com/ormlock/ormlock/sqllock"
	"github.com/ormlock/ormlock/webui"
)

func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }

// browser returns a chromedp context on a fresh headless Chromium
// (--no-sandbox: CI runs as root), closed when the test ends.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if path, err = exec.LookPath("chromium-browser"); err != nil {
			msg := "no chromium: run make ui-test, or as root: apt-get install -y chromium"
			if os.Getenv("CI") != "" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// the first run starts the browser
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// fill writes the ledger rows of the test: a nightly job with done,
// failed, running and missed slots, a hostile job name, and a job that
// only ever failed.
func fill(t *testing.T, k testdb.Kind, db *sql.DB) (table string, hourly ormlock.Schedule) {
	t.Helper()
	table = testdb.Table(t, k, "uitest")
	if err := sqllock.Migrate(context.Background(), db, ormlock.WithLedgerTable(table)); err != nil {
		t.Fatal(err)
	}
	hourly, err := ormlock.Every(time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	// the view counts slots from the current hour: a test that crossed an
	// hour between this fill and its page loads would count one slot more,
	// so a fill close to the hour starts after it (the test's pages load
	// within seconds of the fill)
	if left := time.Until(time.Now().Truncate(time.Hour).Add(time.Hour)); left < 2*time.Minute {
		t.Logf("waiting %v for the hour to turn before filling the ledger", left.Round(time.Second))
		time.Sleep(left + time.Second)
	}
	now := time.Now().UTC().Truncate(time.Hour)
	slot := func(i int) time.Time { return now.Add(-time.Duration(i) * time.Hour) }
	for i := 2; i <= 24; i++ {
		switch {
		case i == 6 || i == 15: // missed
		case i%7 == 0:
			insert(t, k, table, "nightly-settlement", slot(i), "failed", fmt.Sprintf("replica-%c/4%d", 'a'+i%3, i), 3*time.Second, "settlement: upstream ledger refused the batch: connection reset by peer")
		default:
			insert(t, k, table, "nightly-settlement", slot(i), "done", fmt.Sprintf("replica-%c/4%d", 'a'+i%3, i), time.Duration(20+i%5*7)*time.Second, "")
		}
	}
	ledgertest.ClaimRunning(t, db, table, "nightly-settlement", slot(1), "replica-b/412")
	insert(t, k, table, "cache-warmup", slot(11), "running", "replica-c/40", -1, "") // left running: no lock
	for i := 1; i <= 10; i++ {
		insert(t, k, table, "cache-warmup", slot(i), "done", "replica-a/41", time.Duration(1+i%3)*time.Second, "")
	}
	insert(t, k, table, `<img src=x onerror="window.__xss=1">`, slot(3), "failed", "\u202Eevil", time.Second, `<script>window.__xss=2</script>`)
	return table, hourly
}

// insert writes a ledger row of job (no namespace), started two seconds
// into its slot (a running one 90 seconds ago) and lasting d.
func insert(t *testing.T, k testdb.Kind, table, job string, slot time.Time, status, owner string, d time.Duration, errText string) {
	t.Helper()
	started := slot.Add(2 * time.Second)
	if status == "running" {
		started = time.Now().Add(-90 * time.Second)
	}
	ledgertest.InsertRun(t, k, table, "", job, slot, status, owner, started, d, errText)
}

func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("UITEST_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// TestBrowser loads the overview and a job's page in Chromium on
// PostgreSQL and MariaDB and checks what they show: the strips' colours
// (the stylesheet applied under the Content-Security-Policy), the lock's
// holder and the leader, the plot, a hostile job name as inert text, the
// links between pages, and the same content with JavaScript disabled.
func TestBrowser(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
		t.Run(string(k), func(t *testing.T) {
			db := testdb.Open(t, k)
			t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
			table, hourly := fill(t, k, db)
			release := testdb.RawHold(t, k, "", "nightly-backup")
			defer release()
			// names as long as real ones: they must wrap, not widen the page
			const longKey = "billing_eu_west_1.nightly_settlement_export_to_the_data_warehouse_v2"
			releaseLong := testdb.RawHold(t, k, "", longKey)
			defer releaseLong()
			const leaderOwner = "ip_10_12_34_56.eu_west_1.compute.internal.settlement_exp_31337" // < 64: PostgreSQL's application_name
			ledgertest.Leading(t, db, table, ormlock.Name("queue-consumer"), leaderOwner)
			berlin, err := time.LoadLocation("Europe/Berlin")
			if err != nil {
				t.Fatal(err)
			}
			h, err := webui.Handler(db, webui.WithLedgerTable(table), webui.WithSchedule("nightly-settlement", hourly),
				webui.WithLocks(ormlock.Name("nightly-backup"), ormlock.Name("report-export"), ormlock.Name(longKey)),
				webui.WithLeaders(ormlock.Name("queue-consumer")), webui.WithTimeZone(berlin))
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(h)
			defer srv.Close()
			ctx := browser(t)
			do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
				t.Helper()
				tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				if err := chromedp.Do(tctx, steps...); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
			}
			eval := func(expr string) any {
				t.Helper()
				tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				v, err := chromedp.Run(tctx, chromedp.Evaluate[any](expr))
				if err != nil {
					t.Fatalf("%s: %v", expr, err)
				}
				return v
			}
			count := func(sel string) int {
				t.Helper()
				n, _ := eval(`document.querySelectorAll(` + jsString(sel) + `).length`).(float64)
				return int(n)
			}
			text := func(sel string) string {
				t.Helper()
				s, _ := eval(`(document.querySelector(` + jsString(sel) + `) || {}).innerText || ""`).(string)
				return s
			}
			visible := func(sel string) chromedp.Action[chromedp.Void] { return chromedp.WaitVisible(chromedp.CSS(sel)) }

			do("load the overview", chromedp.Navigate(srv.URL+"/"), visible("#jobs"))
			if got := count("tr.job"); got != 3 {
				t.Errorf("%d jobs shown, want 3", got)
			}
			if got := count(`tr.job:has(a[href*="cache-warmup"]) .strip a.s.stale`); got != 1 {
				t.Errorf("cache-warmup's strip: %d stale slots, want 1", got)
			}
			strip := `tr.job:has(a[href*="nightly-settlement"]) .strip `
			for class, want := range map[string]int{"done": 15, "failed": 2, "missed": 2, "running": 1} { // the newest 20 slots
				if got := count(strip + "a.s." + class); got != want {
					t.Errorf("nightly-settlement's strip: %d %s slots, want %d", got, class, want)
				}
			}
			colour := eval(`getComputedStyle(document.querySelector(".strip a.s.failed")).backgroundColor`)
			if colour != "rgb(198, 40, 40)" {
				t.Errorf("a failed slot is %q, want the stylesheet's red: the stylesheet did not apply", colour)
			}
			holders := text("#holders")
			for _, want := range []string{"nightly-backup", "held", "report-export", "free"} {
				if !strings.Contains(holders, want) {
					t.Errorf("holders table lacks %q: %s", want, holders)
				}
			}
			leaders := text("#leaders")
			for _, want := range []string{"queue-consumer", "leading", leaderOwner} {
				if !strings.Contains(leaders, want) {
					t.Errorf("leaders table lacks %q: %s", want, leaders)
				}
			}
			// at 1280 px every table fits the page: nothing wider than the
			// window, no horizontal scrolling
			if wide := eval(`[...document.querySelectorAll("table")].filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 0.5).map(e => (e.id || e.className) + ":" + Math.round(e.getBoundingClientRect().right)).join(" ")`); wide != "" {
				t.Errorf("tables wider than the %v px page: %v", eval(`document.documentElement.clientWidth`), wide)
			}
			if w := eval(`document.documentElement.scrollWidth - document.documentElement.clientWidth`); w != float64(0) {
				t.Errorf("the overview scrolls %v px sideways at 1280 px", w)
			}
			// who runs a job now: the owner of nightly-settlement's running
			// slot, not cache-warmup's stale one
			if got := text(`tr.job:has(a[href*="nightly-settlement"]) td.now`); !strings.Contains(got, "replica-b/412") {
				t.Errorf("nightly-settlement's Running now reads %q, want replica-b/412", got)
			}
			if got := text(`tr.job:has(a[href*="cache-warmup"]) td.now`); got != "-" {
				t.Errorf("cache-warmup's Running now reads %q, want -", got)
			}
			if xss := eval(`window.__xss !== undefined`); xss != false {
				t.Error("a job name ran script")
			}
			if got := text(`tr.job:has(td.name a[href*="img"]) td.name`); !strings.Contains(got, `<img src=x onerror="window.__xss=1">`) {
				t.Errorf("the hostile job name reads %q, want it as text", got)
			}
			screenshot(t, ctx, string(k)+"-overview")

			// a slot of the strip links to its row on the job's page
			do("click a failed slot", chromedp.Click(chromedp.CSS(strip+"a.s.failed")), visible("svg.plot"))
			loc, _ := eval(`location.href`).(string)
			if !strings.Contains(loc, "/job?name=nightly-settlement") || !strings.Contains(loc, "#s") {
				t.Errorf("the slot led to %s", loc)
			}
			if got := count("svg.plot rect.bar"); got != 24 {
				t.Errorf("%d bars in the plot, want 24 (21 runs, 1 running, 2 missed)", got)
			}
			if got := count("#runs tr.run"); got != 24 {
				t.Errorf("%d rows, want 24", got)
			}
			if got := text("#runs"); !strings.Contains(got, "connection reset by peer") || !strings.Contains(got, "running for") {
				t.Errorf("the runs table lacks the error or the running run: %s", got)
			}
			eval(`window.scrollTo(0, 0)`)
			screenshot(t, ctx, string(k)+"-job")

			// the zone and the other parameters are in the URL: pasted, it
			// shows the same
			do("load in Tokyo", chromedp.Navigate(srv.URL+"/job?name=nightly-settlement&tz=Asia/Tokyo&limit=5"), visible("#runs"))
			if got := count("#runs tr.run"); got != 5 {
				t.Errorf("limit=5: %d rows", got)
			}
			if got := text("#runs"); !strings.Contains(got, "JST") || !strings.Contains(got, "UTC") {
				t.Errorf("tz=Asia/Tokyo: no JST and UTC times: %s", got)
			}

			// readable without JavaScript
			scripts := func(off bool) chromedp.Action[chromedp.Void] {
				return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
					_, err := cdp.Call(ctx, tg, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: off})
					return err
				})
			}
			do("no script", scripts(true), chromedp.Navigate(srv.URL+"/"), visible("#jobs"))
			if got := count("tr.job"); got != 3 {
				t.Errorf("without JavaScript: %d jobs", got)
			}
			if got := text("#jobs"); !strings.Contains(got, "nightly-settlement") || !strings.Contains(got, "cache-warmup") {
				t.Errorf("without JavaScript the jobs read %q", got)
			}
			do("script back", scripts(false))
		})
	}
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
