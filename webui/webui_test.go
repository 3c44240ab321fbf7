package webui_test

import (
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
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
		// Failed counts the strip's slots, and says so; Running now names
		// the owner of a run that holds its lock, not of a stale one
		mustContain(t, body, `title="1 of the 8 slots in the strip failed">1<`, "Failed and Missed count the slots in the strip (the latest 20 per job",
			`<th title="failed runs among the slots of the strip`)
		if !regexp.MustCompile(`(?s)>live-job<.*?<td class="now"><a href="job\?name=live-job#s\d+" title="running for [^"]+">replica-live</a>`).MatchString(body) {
			t.Errorf("the overview does not name replica-live as running live-job now")
		}
		if !regexp.MustCompile(`(?s)>nightly-report<.*?<td class="now"><span class="empty">-</span></td>`).MatchString(body) {
			t.Errorf("the overview names a runner of nightly-report, whose running row is stale")
		}

		code, body, _ = get(t, srv, "/job?name=nightly-report&tz=America/New_York")
		if code != http.StatusOK {
			t.Fatalf("GET /job: %d\n%s", code, body)
		}
		mustContain(t, body, `<svg class="plot"`, `class="bar failed"`, `class="bar missed"`, "connection reset by peer",
			"replica-b/2", "replica-c/3", "left running", "its lock is free", `class="bar stale"`, "EST", "UTC",
			"A later trigger of this slot takes it over (a catch-up run, a retry within the slot)", "leaves it until Prune deletes it")
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

// TestOddJobNames: every job the ledger holds can be reached and paged
// past, whatever its name, RunOnce's or written by hand: a trailing space
// (which RunOnce refuses, since MySQL/MariaDB compare it equal to the name
// without), a leading space, spaces only, non-ASCII, '/', '?', '%', '&',
// '#', '+'. Each one's link from the overview shows its run; ?after= with
// each lists exactly the jobs after it, in the overview's order.
func TestOddJobNames(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := testdb.Open(t, k)
		t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
		table := ledger(t, k, db)
		names := []string{"ends-with-space ", " leading-space", "   ", "naïve-日本-🙂", "a/b/../c", "what?x=1", "100%25%", "a&b=c#d", "x+y", "zz-last"}
		for i, name := range names {
			ledgertest.InsertRun(t, k, table, "", name, slot(1), "failed", "o", slot(1), time.Second, "err-"+strconv.Itoa(i))
		}
		srv := serve(t, db, webui.WithLedgerTable(table))
		// the overview's jobs, in its order, as their links name them
		listed := func(path string) []string {
			t.Helper()
			code, body, _ := get(t, srv, path)
			if code != http.StatusOK {
				t.Fatalf("GET %s: %d\n%s", path, code, body)
			}
			var out []string
			for _, m := range regexp.MustCompile(`<td class="name"><a href="(job\?[^"]*)">`).FindAllStringSubmatch(body, -1) {
				u, err := url.Parse(html.UnescapeString(m[1]))
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, u.Query().Get("name"))
			}
			return out
		}
		all := listed("/")
		if len(all) != len(names) {
			t.Fatalf("the overview lists %d jobs %q, want all %d", len(all), all, len(names))
		}
		for _, name := range names {
			if !slices.Contains(all, name) {
				t.Errorf("%q is not listed: %q", name, all)
			}
		}
		for i, name := range all {
			code, body, _ := get(t, srv, "/job?name="+url.QueryEscape(name))
			want := "err-" + strconv.Itoa(slices.Index(names, name))
			if code != http.StatusOK || !strings.Contains(body, ">"+want+"<") {
				t.Errorf("the page of %q: %d, want 200 with its run (%s)\n%s", name, code, want, body)
			}
			if after := listed("/?after=" + url.QueryEscape(name)); !slices.Equal(after, all[i+1:]) {
				t.Errorf("?after=%q lists %q, want %q", name, after, all[i+1:])
			}
		}
	})
}
