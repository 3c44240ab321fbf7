package webui_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/apiv1"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/ledgertest"
	"github.com/ormlock/ormlock/sqllock"
	"github.com/ormlock/ormlock/webui"
)

// getJSON fetches path, checks that the answer is ASCII-only JSON with the
// API's headers and status code, and decodes it into v.
func getJSON(t *testing.T, srv interface{ Client() *http.Client }, base, method, path string, code int, v any) http.Header {
	t.Helper()
	req, err := http.NewRequest(method, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatalf("%s %s: not JSON: %v", method, path, err)
	}
	if resp.StatusCode != code {
		t.Fatalf("%s %s: %d, want %d: %s", method, path, resp.StatusCode, code, raw)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("%s %s: Content-Type %q, nosniff %q", method, path, ct, resp.Header.Get("X-Content-Type-Options"))
	}
	for i, c := range raw {
		if c >= 0x7f || c == '<' || c == '>' || c == '&' {
			t.Fatalf("%s %s: byte %d of the answer is %q, not escaped: %s", method, path, i, c, raw)
		}
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields() // the documented structs name every field
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s %s: %v: %s", method, path, err, raw)
	}
	return resp.Header
}

// TestAPIShapes: every endpoint answers its documented struct, hostile job
// names, owners and errors exact and escaped, on PostgreSQL and MariaDB.
func TestAPIShapes(t *testing.T) {
	forEachDialect(t, func(t *testing.T, k testdb.Kind, db *sql.DB, table string) {
		for _, h := range hostile {
			ledgertest.InsertRun(t, k, table, "", "job "+h, slot(1), "failed", "owner "+h, slot(1), 2*time.Second, "error "+h)
		}
		ledgertest.InsertRun(t, k, table, "", "..", slot(1), "done", "o", slot(1), time.Second, "")
		leader := ormlock.Name("leader \u202E<b>")
		ledgertest.Leading(t, db, table, leader, "<i>lead</i>")
		srv := serve(t, db, webui.WithLedgerTable(table), webui.WithLeaders(leader), webui.WithLocks(ormlock.Name("lock <script>")))

		var jobs apiv1.JobList
		getJSON(t, srv, srv.URL, http.MethodGet, "/api/v1/jobs", 200, &jobs)
		if len(jobs.Jobs) != len(hostile)+1 || jobs.Next != "" {
			t.Fatalf("jobs: %+v", jobs)
		}
		base, _ := url.Parse(srv.URL + "/api/v1/jobs")
		for _, j := range jobs.Jobs {
			if j.LastRun == nil || j.LastRun.Job != j.Name || !j.LastRun.Slot.Equal(slot(1)) || j.LastRun.DurationMS == nil {
				t.Fatalf("job %q: last run %+v", j.Name, j.LastRun)
			}
			var runs apiv1.RunList
			link, err := base.Parse(j.Runs)
			if err != nil {
				t.Fatal(err)
			}
			getJSON(t, srv, "", http.MethodGet, link.String(), 200, &runs)
			if runs.Job != j.Name || len(runs.Runs) != 1 || runs.Runs[0].Owner != j.LastRun.Owner {
				t.Errorf("runs of %q at %s: %+v", j.Name, link, runs)
			}
		}
		var r apiv1.RunList
		getJSON(t, srv, srv.URL, http.MethodGet, "/api/v1/jobs/"+url.PathEscape("job "+hostile[0])+"/runs", 200, &r)
		if len(r.Runs) != 1 || r.Runs[0].Status != "failed" || r.Runs[0].Error != "error "+hostile[0] || *r.Runs[0].DurationMS != 2000 || r.Runs[0].Slot.Location() != time.UTC {
			t.Errorf("runs: %+v", r)
		}
		var leaders apiv1.LeaderList
		getJSON(t, srv, srv.URL, http.MethodGet, "/api/v1/leaders", 200, &leaders)
		if len(leaders.Leaders) != 1 || !leaders.Leaders[0].Held || leaders.Leaders[0].Owner != "<i>lead</i>" || leaders.Leaders[0].Token == nil || leaders.Leaders[0].Key != leader.String() {
			t.Errorf("leaders: %+v", leaders)
		}
		var holders apiv1.HolderList
		getJSON(t, srv, srv.URL, http.MethodGet, "/api/v1/holders", 200, &holders)
		if len(holders.Holders) != 1 || holders.Holders[0].Held {
			t.Errorf("holders: %+v", holders)
		}
		var fences apiv1.FenceList
		getJSON(t, srv, srv.URL, http.MethodGet, "/api/v1/fences", 200, &fences)
		if len(fences.Fences) != 1 || fences.Fences[0].Token != *leaders.Leaders[0].Token {
			t.Errorf("fences: %+v", fences)
		}
		job := "job " + hostile[0]
		rec, err := sqllock.Act(context.Background(), db, ormlock.Pause(job).By("alice \u202E", "incident <42>"), ormlock.WithLedgerTable(table))
		if err != nil {
			t.Fatal(err)
		}
		var controls apiv1.ControlList
		getJSON(t, srv, srv.URL, http.MethodGet, "/api/v1/controls", 200, &controls)
		if len(controls.Controls) != 1 || !controls.Controls[0].Paused || controls.Controls[0].Job != job || controls.Controls[0].Author != "alice \u202E" || controls.Controls[0].ChangedAt.IsZero() {
			t.Errorf("controls: %+v", controls)
		}
		var actions apiv1.ActionList
		getJSON(t, srv, srv.URL, http.MethodGet, "/api/v1/actions?job="+url.QueryEscape(job), 200, &actions)
		if len(actions.Actions) != 1 || actions.Actions[0].ID != rec.ID || actions.Actions[0].Kind != "pause" || actions.Actions[0].Reason != "incident <42>" || actions.Actions[0].Slot != nil {
			t.Errorf("actions: %+v", actions)
		}
		getJSON(t, srv, srv.URL, http.MethodGet, "/api/v1/actions?job=other", 200, &actions)
		if len(actions.Actions) != 0 {
			t.Errorf("actions of another job: %+v", actions)
		}
	})
}

// TestAPIPaging: a job's runs page by slot, each page's next link leading
// to the next older one, none twice, none left out; jobs page by name.
func TestAPIPaging(t *testing.T) {
	forEachDialect(t, func(t *testing.T, k testdb.Kind, db *sql.DB, table string) {
		for i := 1; i <= 7; i++ {
			ledgertest.InsertRun(t, k, table, "", "pager", slot(i), "done", "o", slot(i), time.Second, "")
			ledgertest.InsertRun(t, k, table, "", "job"+string(rune('a'+i)), slot(i), "done", "o", slot(i), time.Second, "")
		}
		srv := serve(t, db, webui.WithLedgerTable(table))
		link, _ := url.Parse(srv.URL + "/api/v1/jobs/pager/runs?limit=3")
		var seen []time.Time
		for pages := 0; ; pages++ {
			var p apiv1.RunList
			getJSON(t, srv, "", http.MethodGet, link.String(), 200, &p)
			for _, r := range p.Runs {
				seen = append(seen, r.Slot)
			}
			if p.Next == "" {
				if pages != 2 || p.NextBefore != nil {
					t.Fatalf("last page %d: %+v", pages, p)
				}
				break
			}
			if !p.NextBefore.Equal(p.Runs[len(p.Runs)-1].Slot) {
				t.Fatalf("next_before %v, oldest %v", p.NextBefore, p.Runs[len(p.Runs)-1].Slot)
			}
			link, _ = link.Parse(p.Next)
		}
		for i, s := range seen {
			if !s.Equal(slot(i + 1)) {
				t.Fatalf("slots %v", seen)
			}
		}
		if len(seen) != 7 {
			t.Fatalf("%d runs over the pages, want 7", len(seen))
		}
		var names []string
		link, _ = url.Parse(srv.URL + "/api/v1/jobs?limit=3")
		for {
			var p apiv1.JobList
			getJSON(t, srv, "", http.MethodGet, link.String(), 200, &p)
			for _, j := range p.Jobs {
				names = append(names, j.Name)
			}
			if p.Next == "" {
				break
			}
			link, _ = link.Parse(p.Next)
		}
		if len(names) != 8 || names[0] != "jobb" || names[7] != "pager" {
			t.Errorf("jobs over the pages: %q", names)
		}
	})
}

// TestAPIBoundsAndMethods: bad parameters are 400s, limits are clamped,
// an unknown path is a 404, a host the view does not answer for a 421, and
// every method but GET and HEAD a 405 (a read-only API takes no action),
// each as JSON.
func TestAPIBoundsAndMethods(t *testing.T) {
	k := testdb.Postgres
	db := testdb.Open(t, k)
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
	table := ledger(t, k, db)
	for i := 1; i <= 3; i++ {
		ledgertest.InsertRun(t, k, table, "", "b", slot(i), "done", "o", slot(i), time.Second, "")
	}
	srv := serve(t, db, webui.WithLedgerTable(table))
	var e apiv1.Error
	for path, code := range map[string]int{
		"/api/v1/jobs?limit=x":                               400,
		"/api/v1/jobs?limit=1&limit=2":                       400,
		"/api/v1/jobs/b/runs?before=yesterday":               400,
		"/api/v1/runs":                                       400,
		"/api/v1/jobs/" + url.PathEscape("a\xff") + "/runs":  400,
		"/api/v1/jobs/" + strings.Repeat("x", 300) + "/runs": 400,
		"/api/v1/jobs/b/runs/":                               404,
		"/api/v1/nope":                                       404,
		"/api/v2/jobs":                                       404,
		"/api":                                               404,
	} {
		e = apiv1.Error{}
		getJSON(t, srv, srv.URL, http.MethodGet, path, code, &e)
		if e.Error == "" {
			t.Errorf("GET %s: no error text", path)
		}
	}
	var r apiv1.RunList
	getJSON(t, srv, srv.URL, http.MethodGet, "/api/v1/jobs/b/runs?limit=-5", 200, &r)
	if len(r.Runs) != 1 || r.Next == "" {
		t.Errorf("limit=-5: %+v", r)
	}
	r = apiv1.RunList{}
	getJSON(t, srv, srv.URL, http.MethodGet, "/api/v1/jobs/b/runs?limit=99999999999999999999", 200, &r)
	if len(r.Runs) != 3 || r.Next != "" {
		t.Errorf("a huge limit: %+v", r)
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		for _, path := range []string{"/api/v1/actions", "/api/v1/jobs", "/api/v1/nope"} {
			h := getJSON(t, srv, srv.URL, m, path, 405, &e)
			if h.Get("Allow") != "GET, HEAD" {
				t.Errorf("%s %s: Allow %q", m, path, h.Get("Allow"))
			}
		}
	}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL+"/api/v1/jobs", nil)
	req.Host = "evil.example"
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("a foreign host: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	code, body, _ := do(t, srv, http.MethodHead, "/api/v1/jobs", "")
	if code != 200 || body != "" {
		t.Errorf("HEAD: %d %q", code, body)
	}
}
