package webui_test

import (
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/ledgertest"
	"github.com/ormlock/ormlock/webui"
)

// TestPages: the overview shows each job's strip (done, failed, running,
// and missed from the schedule), the held lock, the leader with its owner
// and fencing token, and the fence counters; the job page shows every run
// with its error and the duration plot; on every server.
func TestPages(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := testdb.Open(t, k)
		t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
		table := ledger(t, k, db)
		hourly, err := ormlock.Every(time.Hour, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := 2; i <= 8; i++ {
			switch i {
			case 5: // missed: no row
			case 3:
				ledgertest.InsertRun(t, k, table, "", "nightly-report", slot(i), "failed", "replica-b/2", slot(i).Add(time.Second), 4*time.Second, "connection reset by peer")
			default:
				ledgertest.InsertRun(t, k, table, "", "nightly-report", slot(i), "done", "replica-a/1", slot(i).Add(time.Second), time.Duration(i)*time.Second, "")
			}
		}
		ledgertest.InsertRun(t, k, table, "", "nightly-report", slot(1), "running", "replica-c/3", time.Now().Add(-time.Minute), -1, "")
		ledgertest.InsertRun(t, k, table, "", "cleanup", slot(1), "done", "replica-a/1", slot(1), time.Second, "")
		ledgertest.ClaimRunning(t, db, table, "live-job", slot(1), "replica-live")
		release := testdb.RawHold(t, k, "", "webui-held")
		defer release()
		ledgertest.Leading(t, db, table, ormlock.Name("webui-leader"), "replica-a")

		srv := serve(t, db, webui.WithLedgerTable(table), webui.WithSchedule("nightly-report", hourly),
			webui.WithLocks(ormlock.Name("webui-held"), ormlock.Name("webui-free")),
			webui.WithLeaders(ormlock.Name("webui-leader")), webui.WithTimeZone(mustZone(t, "Europe/Berlin")))
		code, body, hdr := get(t, srv, "/")
		if code != http.StatusOK {
			t.Fatalf("GET /: %d\n%s", code, body)
		}
		if got := hdr.Get("Content-Security-Policy"); got != webui.ContentSecurityPolicy {
			t.Errorf("CSP %q", got)
		}
		mustContain(t, body, ">nightly-report<", ">cleanup<", `class="s done"`, `class="s failed"`, `class="s missed"`, `class="s stale"`,
			`status running">running<`, `class="s running"`,
			"webui-held", "webui-free", `status held">held<`, `status free">free<`,
			"webui-leader", `status held">leading<`, ">name:webui-leader<", "CET", "UTC")
		if !regexp.MustCompile(`(?s)webui-leader</td>.*?replica-a</td>.*?<td class="num">1</td>`).MatchString(body) {
			t.Errorf("leader row lacks its owner and token 1:\n%s", body)
		}
		if strings.Contains(body, "error") && strings.Contains(body, `class="error"`) {
			t.Errorf("a section failed:\n%s", body)
		}
		// the strip is oldest to newest, the newest (running) last
		strip := regexp.MustCompile(`(?s)>nightly-report<.*?<td class="strip">(.*?)</td>`).FindStringSubmatch(body)
		if strip == nil {
			t.Fatal("no strip")
		}
		classes := regexp.MustCompile(`class="s (\w+)"`).FindAllStringSubmatch(strip[1], -1)
		var got []string
		for _, c := range classes {
			got = append(got, c[1])
		}
		// the running row has no lock held: stale
		if want := "done done done missed done failed done stale"; strings.Join(got, " ") != want {
			t.Errorf("strip %q, want %q", strings.Join(got, " "), want)
		}

		code, body, _ = get(t, srv, "/job?name=nightly-report&tz=America/New_York")
		if code != http.StatusOK {
			t.Fatalf("GET /job: %d\n%s", code, body)
		}
		mustContain(t, body, `<svg class="plot"`, `class="bar failed"`, `class="bar missed"`, "connection reset by peer",
			"replica-b/2", "replica-c/3", "left running", "its lock is free", `class="bar stale"`, "EST", "UTC")
		if n := strings.Count(body, `<tr id="s`); n != 8 {
			t.Errorf("%d run rows, want 8 (7 runs + 1 missed)", n)
		}
		code, body, _ = get(t, srv, "/job?name=live-job")
		if code != http.StatusOK {
			t.Fatalf("GET /job: %d\n%s", code, body)
		}
		mustContain(t, body, `status running">running<`, "running for", "replica-live", `class="bar running"`)
	})
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestMounted: under a prefix (http.StripPrefix on a service's mux) every
// link of the view stays under it: the stylesheet, a job's page, and back.
func TestMounted(t *testing.T) {
	k := testdb.MariaDB
	db := testdb.Open(t, k)
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
	table := ledger(t, k, db)
	ledgertest.InsertRun(t, k, table, "", "mounted-job", slot(1), "done", "o", slot(1), time.Second, "")
	h, err := webui.Handler(db, webui.WithLedgerTable(table))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/ormlock/", http.StripPrefix("/admin/ormlock", h))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	base := srv.URL + "/admin/ormlock/"
	resp, err := srv.Client().Get(base)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	body := string(b)
	job := regexp.MustCompile(`href="(job\?name=mounted-job)"`).FindStringSubmatch(body)
	if resp.StatusCode != http.StatusOK || job == nil || !strings.Contains(body, `href="static/style.css"`) {
		t.Fatalf("GET %s: %d\n%s", base, resp.StatusCode, body)
	}
	for _, rel := range []string{"static/style.css", job[1]} {
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		ref, _ := url.Parse(html.UnescapeString(rel))
		resp, err := srv.Client().Get(u.ResolveReference(ref).String())
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s under the prefix: %d", rel, resp.StatusCode)
		}
	}
}
