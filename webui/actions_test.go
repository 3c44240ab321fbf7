package webui_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
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

// userHeader is the header the tests' author function reads: what a
// service's authentication would establish.
const userHeader = "X-Test-User"

func headerAuthor(req *http.Request) (string, error) {
	if u := req.Header.Get(userHeader); u != "" {
		if u == "mallory" {
			return "", errors.New("mallory may not act")
		}
		return u, nil
	}
	return "", nil
}

// testKey is the CSRF key of the tests' handlers.
var testKey = []byte("0123456789abcdef0123456789abcdef")

// send makes a request of srv with headers (name, value pairs) and body,
// and returns the status and body.
func send(t *testing.T, srv *httptest.Server, method, path, body string, headers ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// tableState is what the tables the actions write hold: the ledger's rows
// and the controls and actions tables' (absent ones are said so), to
// compare before and after requests that must change nothing.
func tableState(t *testing.T, k testdb.Kind, db *sql.DB, table string) string {
	t.Helper()
	q := func(name, cols string) string {
		quoted := `"` + name + `"`
		if k.Dialect() == "mysql" {
			quoted = "`" + name + "`"
		}
		rows, err := db.Query("SELECT " + cols + " FROM " + quoted + " ORDER BY 1, 2, 3")
		if err != nil {
			return name + ": absent\n"
		}
		defer rows.Close()
		var b strings.Builder
		cs, _ := rows.Columns()
		vals := make([]any, len(cs))
		ptrs := make([]any, len(cs))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s: %v\n", name, vals)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	return q(table, "job, slot, status, owner, error") + q(table+"_controls", "kind, name, paused, author") + q(table+"_actions", "kind, name, author, outcome")
}

var (
	csrfRe   = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	actionRe = regexp.MustCompile(`<form method="post" action="([^"]+)"`)
)

// confirmPage opens the confirmation page of path as user and returns its
// form's action and CSRF token.
func confirmPage(t *testing.T, srv *httptest.Server, path, user string) (action, token string) {
	t.Helper()
	code, body := send(t, srv, http.MethodGet, path, "", userHeader, user)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d\n%s", path, code, body)
	}
	a, c := actionRe.FindStringSubmatch(body), csrfRe.FindStringSubmatch(body)
	if a == nil || c == nil {
		t.Fatalf("GET %s: no form\n%s", path, body)
	}
	return "/" + html.UnescapeString(a[1]), html.UnescapeString(c[1])
}

// postForm posts the confirmation form as a browser on the view's own
// page would.
func postForm(t *testing.T, srv *httptest.Server, action, token, reason string, headers ...string) (int, string) {
	t.Helper()
	form := url.Values{"csrf": {token}, "reason": {reason}}.Encode()
	h := append([]string{"Content-Type", "application/x-www-form-urlencoded", "Sec-Fetch-Site", "same-origin", "Origin", srv.URL}, headers...)
	return send(t, srv, http.MethodPost, action, form, h...)
}

// postAPI posts an action to /api/v1/actions as a script would.
func postAPI(t *testing.T, srv *httptest.Server, user string, body map[string]string) (int, string) {
	t.Helper()
	b, _ := json.Marshal(body)
	return send(t, srv, http.MethodPost, "/api/v1/actions", string(b), "Content-Type", "application/json", webui.ActionHeader, "1", userHeader, user)
}

// TestReadOnlyAcceptsNoAction: a view without WithActions answers every
// POST, to every path, 405; it has no confirmation page; its pages carry
// no form and its CSP forbids them; and nothing in the ledger, the
// controls table or the actions log changes.
func TestReadOnlyAcceptsNoAction(t *testing.T) {
	forEachDialect(t, func(t *testing.T, k testdb.Kind, db *sql.DB, table string) {
		ledgertest.InsertRun(t, k, table, "", "ro-act", slot(2), "done", "a", slot(2), time.Second, "")
		ledgertest.InsertRun(t, k, table, "", "ro-act", slot(1), "failed", "a", slot(1), time.Second, "boom")
		ledgertest.Leading(t, db, table, ormlock.Name("ro-act-leader"), "ro-owner")
		hourly, _ := ormlock.Every(time.Hour, nil)
		srv := serve(t, db, webui.WithLedgerTable(table), webui.WithSchedule("ro-act", hourly), webui.WithLeaders(ormlock.Name("ro-act-leader")))
		before := tableState(t, k, db, table)
		s1 := url.QueryEscape(slot(1).Format(time.RFC3339))
		form := "csrf=x&reason=r"
		jsonBody := `{"kind":"pause","job":"ro-act","reason":"r"}`
		for _, path := range []string{"/", "/job?name=ro-act", "/act", "/act?kind=pause&job=ro-act", "/act?kind=rerun&job=ro-act&slot=" + s1,
			"/act?kind=resign&key=ro-act-leader", "/api/v1/actions", "/api/v1/jobs", "/static/style.css", "/nowhere"} {
			for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
				for _, h := range [][]string{
					{"Content-Type", "application/x-www-form-urlencoded", "Sec-Fetch-Site", "same-origin", userHeader, "alice"},
					{"Content-Type", "application/json", webui.ActionHeader, "1", userHeader, "alice"},
				} {
					body := form
					if h[1] == "application/json" {
						body = jsonBody
					}
					if code, resp := send(t, srv, m, path, body, h...); code != http.StatusMethodNotAllowed {
						t.Errorf("%s %s (%s): %d, want 405\n%s", m, path, h[1], code, resp)
					}
				}
			}
		}
		if code, _ := send(t, srv, http.MethodGet, "/act?kind=pause&job=ro-act", "", userHeader, "alice"); code != http.StatusNotFound {
			t.Errorf("GET /act on a read-only view: %d, want 404", code)
		}
		for _, path := range []string{"/", "/job?name=ro-act"} {
			code, body, hd := get(t, srv, path)
			if code != http.StatusOK {
				t.Fatalf("GET %s: %d", path, code)
			}
			for _, bad := range []string{"<form", "act?", "resign", "pause…", "rerun…", "skip…"} {
				if strings.Contains(body, bad) {
					t.Errorf("the read-only %s carries %q", path, bad)
				}
			}
			if csp := hd.Get("Content-Security-Policy"); csp != webui.ContentSecurityPolicy || !strings.Contains(csp, "form-action 'none'") {
				t.Errorf("the read-only view's CSP is %q", csp)
			}
		}
		if after := tableState(t, k, db, table); after != before {
			t.Errorf("a read-only view's tables changed:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})
}

// forgeToken is a CSRF token as the view makes them (webui.WithCSRFKey's
// doc: v1.EXPIRY.HMAC-SHA256(key, prefix, author, expiry)), for tests that
// need one expired or made with another key.
func forgeToken(key []byte, author string, expiry time.Time) string {
	exp := strconv.FormatInt(expiry.Unix(), 10)
	m := hmac.New(sha256.New, key)
	m.Write([]byte("ormlock webui csrf v1\x00" + author + "\x00" + exp))
	return "v1." + exp + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// TestActionsCSRF: with actions on, a form post changes nothing unless it
// comes from the view's own origin with a token made for its author by the
// view's key within its lifetime, and the service's function names that
// author; the JSON API changes nothing without its JSON content type and
// custom header, or from another site.
func TestActionsCSRF(t *testing.T) {
	forEachDialect(t, func(t *testing.T, k testdb.Kind, db *sql.DB, table string) {
		ledgertest.InsertRun(t, k, table, "", "csrf-job", slot(1), "failed", "a", slot(1), time.Second, "boom")
		srv := serve(t, db, webui.WithLedgerTable(table), webui.WithActions(headerAuthor, webui.WithCSRFKey(testKey)))
		before := tableState(t, k, db, table)
		action, token := confirmPage(t, srv, "/act?kind=pause&job=csrf-job", "alice")
		if !strings.HasPrefix(action, "/act?") || !strings.Contains(action, "kind=pause") {
			t.Fatalf("the form posts to %q", action)
		}
		refused := func(what string, code int, body string) {
			t.Helper()
			if code != http.StatusForbidden {
				t.Errorf("%s: %d, want 403\n%s", what, code, body)
			} else if !strings.Contains(body, "nothing was changed") {
				t.Errorf("%s: the page does not say nothing was changed\n%s", what, body)
			}
		}
		form := url.Values{"csrf": {token}, "reason": {"r"}}.Encode()
		ct := "application/x-www-form-urlencoded"
		code, body := send(t, srv, http.MethodPost, action, form, "Content-Type", ct, "Sec-Fetch-Site", "cross-site", userHeader, "alice")
		refused("a cross-site form post (Sec-Fetch-Site)", code, body)
		code, body = send(t, srv, http.MethodPost, action, form, "Content-Type", ct, "Origin", "http://evil.example", userHeader, "alice")
		refused("a cross-site form post (Origin)", code, body)
		code, body = send(t, srv, http.MethodPost, action, form, "Content-Type", ct, "Origin", "null", userHeader, "alice")
		refused("a post from an opaque origin", code, body)
		code, body = send(t, srv, http.MethodPost, action, form, "Content-Type", ct, "Origin", srv.URL, "Sec-Fetch-Site", "cross-site", userHeader, "alice")
		refused("a cross-site post naming the view's origin", code, body)
		code, body = send(t, srv, http.MethodPost, action, form, "Content-Type", ct, "Sec-Fetch-Site", "same-site", userHeader, "alice")
		refused("a post from a sibling site", code, body)
		code, body = postForm(t, srv, action, "", "r", userHeader, "alice")
		refused("no token", code, body)
		code, body = postForm(t, srv, action, forgeToken([]byte("another key, 32 bytes long......"), "alice", time.Now().Add(time.Hour)), "r", userHeader, "alice")
		refused("a token of another key", code, body)
		code, body = postForm(t, srv, action, "v1.99999999999.AAAA", "r", userHeader, "alice")
		refused("a forged token", code, body)
		code, body = postForm(t, srv, action, forgeToken(testKey, "alice", time.Now().Add(-time.Minute)), "r", userHeader, "alice")
		refused("an expired token", code, body)
		if !strings.Contains(body, "expired") {
			t.Errorf("an expired token's page does not say so:\n%s", body)
		}
		code, body = postForm(t, srv, action, token, "r", userHeader, "bob")
		refused("alice's token posted by bob", code, body)
		code, body = postForm(t, srv, action, token, "r")
		refused("no author", code, body)
		code, body = postForm(t, srv, action, token, "r", userHeader, "mallory")
		refused("an author the service refuses", code, body)
		if code, body := send(t, srv, http.MethodGet, "/act?kind=pause&job=csrf-job", "", userHeader, "mallory"); code != http.StatusForbidden || strings.Contains(body, "<form") {
			t.Errorf("the confirmation page for a refused author: %d\n%s", code, body)
		}
		// the JSON API
		jb := `{"kind":"pause","job":"csrf-job","reason":"r"}`
		if code, body := send(t, srv, http.MethodPost, "/api/v1/actions", jb, "Content-Type", "application/json", userHeader, "alice"); code != http.StatusUnsupportedMediaType {
			t.Errorf("API without %s: %d\n%s", webui.ActionHeader, code, body)
		}
		if code, body := send(t, srv, http.MethodPost, "/api/v1/actions", jb, "Content-Type", "text/plain", webui.ActionHeader, "1", userHeader, "alice"); code != http.StatusUnsupportedMediaType {
			t.Errorf("API as text/plain (a simple cross-site request): %d\n%s", code, body)
		}
		if code, body := send(t, srv, http.MethodPost, "/api/v1/actions", "kind=pause&job=csrf-job", "Content-Type", ct, userHeader, "alice"); code != http.StatusUnsupportedMediaType {
			t.Errorf("API as a form: %d\n%s", code, body)
		}
		code, body = send(t, srv, http.MethodPost, "/api/v1/actions", jb, "Content-Type", "application/json", webui.ActionHeader, "1", "Sec-Fetch-Site", "cross-site", userHeader, "alice")
		refused("a cross-site API call", code, body)
		code, body = postAPI(t, srv, "", map[string]string{"kind": "pause", "job": "csrf-job"})
		refused("an API call with no author", code, body)
		code, body = postAPI(t, srv, "mallory", map[string]string{"kind": "pause", "job": "csrf-job"})
		refused("an API call by a refused author", code, body)
		if after := tableState(t, k, db, table); after != before {
			t.Errorf("refused requests changed the tables:\nbefore:\n%s\nafter:\n%s", before, after)
		}
		// the view's headers allow its own forms, nothing else
		_, _, hd := get(t, srv, "/")
		if csp := hd.Get("Content-Security-Policy"); csp != webui.ActionsContentSecurityPolicy {
			t.Errorf("CSP with actions on: %q", csp)
		}
	})
}

// TestActionsBadInput: an action the view or Act refuses changes nothing
// and says why: an unknown job, a slot that is not a firing of the job's
// schedule, a slot that is done, a slot that is no whole second, an
// unknown kind, a key the view does not watch.
func TestActionsBadInput(t *testing.T) {
	forEachDialect(t, func(t *testing.T, k testdb.Kind, db *sql.DB, table string) {
		hourly, _ := ormlock.Every(time.Hour, nil)
		ledgertest.InsertRun(t, k, table, "", "bad-job", slot(2), "done", "a", slot(2), time.Second, "")
		ledgertest.InsertRun(t, k, table, "", "bad-job", slot(1), "failed", "a", slot(1), time.Second, "boom")
		srv := serve(t, db, webui.WithLedgerTable(table), webui.WithSchedule("bad-job", hourly), webui.WithActions(headerAuthor, webui.WithCSRFKey(testKey)),
			webui.WithLeaders(ormlock.Name("bad-leader")))
		before := tableState(t, k, db, table)
		rfc := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
		for _, c := range []struct {
			what string
			in   map[string]string
			code int
			says string
		}{
			{"an unknown job's skip", map[string]string{"kind": "skip", "job": "no-such-job", "slot": rfc(slot(1))}, http.StatusNotFound, "unknown"},
			{"an unknown job's pause", map[string]string{"kind": "pause", "job": "no-such-job"}, http.StatusNotFound, "unknown"},
			{"a slot that is not a firing", map[string]string{"kind": "skip", "job": "bad-job", "slot": rfc(slot(1).Add(30 * time.Minute))}, http.StatusBadRequest, "not a firing"},
			{"a sub-second slot", map[string]string{"kind": "rerun", "job": "bad-job", "slot": slot(1).Add(time.Millisecond).Format(time.RFC3339Nano)}, http.StatusBadRequest, "whole second"},
			{"a slot that is no time", map[string]string{"kind": "rerun", "job": "bad-job", "slot": "yesterday"}, http.StatusBadRequest, "RFC 3339"},
			{"a skip without a slot", map[string]string{"kind": "skip", "job": "bad-job"}, http.StatusBadRequest, "needs the slot"},
			{"a pause with a slot", map[string]string{"kind": "pause", "job": "bad-job", "slot": rfc(slot(1))}, http.StatusBadRequest, "takes no slot"},
			{"an unknown kind", map[string]string{"kind": "delete", "job": "bad-job"}, http.StatusBadRequest, "not an action"},
			{"a key the view does not watch", map[string]string{"kind": "resign", "key": "other-leader"}, http.StatusBadRequest, "not a leader key"},
			{"a reason too long", map[string]string{"kind": "pause", "job": "bad-job", "reason": strings.Repeat("é", 1001)}, http.StatusBadRequest, "at most 1000"},
			{"a done slot's skip", map[string]string{"kind": "skip", "job": "bad-job", "slot": rfc(slot(2))}, http.StatusBadRequest, "done"},
			{"a done slot's rerun", map[string]string{"kind": "rerun", "job": "bad-job", "slot": rfc(slot(2))}, http.StatusBadRequest, "done"},
		} {
			code, body := postAPI(t, srv, "alice", c.in)
			if code != c.code || !strings.Contains(body, c.says) {
				t.Errorf("API, %s: %d %s, want %d saying %q", c.what, code, strings.TrimSpace(body), c.code, c.says)
			}
			if !json.Valid([]byte(body)) {
				t.Errorf("API, %s: the answer is not JSON: %s", c.what, body)
			}
		}
		if code, body := send(t, srv, http.MethodPost, "/api/v1/actions", `{"kind":"pause","job":"bad-job","extra":1}`, "Content-Type", "application/json", webui.ActionHeader, "1", userHeader, "alice"); code != http.StatusBadRequest {
			t.Errorf("API, an unknown field: %d %s", code, body)
		}
		// through the form: the unknown job is refused on its confirmation
		// page, and a done slot's skip when posted
		if code, body := send(t, srv, http.MethodGet, "/act?kind=skip&job=bad-job&slot="+url.QueryEscape(rfc(slot(1).Add(time.Minute))), "", userHeader, "alice"); code != http.StatusBadRequest || strings.Contains(body, "<form") {
			t.Errorf("the confirmation page of a slot that is not a firing: %d\n%s", code, body)
		}
		if code, body := send(t, srv, http.MethodGet, "/act?kind=pause&job=x%FF", "", userHeader, "alice"); code != http.StatusBadRequest || !strings.Contains(body, "UTF-8") {
			t.Errorf("the confirmation page of a job that is not UTF-8: %d\n%s", code, body)
		}
		action, token := confirmPage(t, srv, "/act?kind=skip&job=bad-job&slot="+url.QueryEscape(rfc(slot(2))), "alice")
		if code, body := postForm(t, srv, action, token, "r", userHeader, "alice"); code != http.StatusBadRequest || !strings.Contains(body, "done") {
			t.Errorf("the form of a done slot's skip: %d\n%s", code, body)
		}
		if after := tableState(t, k, db, table); after != before {
			t.Errorf("refused actions changed the tables:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})
}

// TestActions: pause, resume, skip and rerun through the confirmation
// forms and the API, each shown on the job's page and in its actions log
// with its author and reason.
func TestActions(t *testing.T) {
	forEachDialect(t, func(t *testing.T, k testdb.Kind, db *sql.DB, table string) {
		hourly, _ := ormlock.Every(time.Hour, nil)
		ledgertest.InsertRun(t, k, table, "", "act-job", slot(3), "done", "a", slot(3), time.Second, "")
		ledgertest.InsertRun(t, k, table, "", "act-job", slot(2), "failed", "a", slot(2), time.Second, "boom")
		leader := ormlock.Name("act-leader-" + string(k))
		ledgertest.Leading(t, db, table, leader, "act-owner")
		srv := serve(t, db, webui.WithLedgerTable(table), webui.WithSchedule("act-job", hourly), webui.WithActions(headerAuthor, webui.WithCSRFKey(testKey)),
			webui.WithLeaders(leader, ormlock.Name("act-nobody")))
		// resign: the overview links each leader to its confirmation page,
		// which names who leads
		_, body := send(t, srv, http.MethodGet, "/", "", userHeader, "alice")
		mustContain(t, body, `class="resign"`, "act?key=act-leader")
		for key, want := range map[string]string{leader.String(): "Now led by act-owner", "act-nobody": "Nobody leads now"} {
			if code, body := send(t, srv, http.MethodGet, "/act?kind=resign&key="+url.QueryEscape(key), "", userHeader, "alice"); code != http.StatusOK || !strings.Contains(body, want) {
				t.Errorf("resign %s's confirmation page: %d, want %q\n%s", key, code, want, body)
			}
		}
		if code, body := postAPI(t, srv, "alice", map[string]string{"kind": "resign", "key": "act-nobody"}); code != http.StatusBadRequest {
			t.Errorf("resign of a key nobody leads: %d %s", code, body)
		}
		if code, body := postAPI(t, srv, "alice", map[string]string{"kind": "resign", "key": leader.String(), "reason": "sick host"}); code != http.StatusOK || !strings.Contains(body, `"author":"alice"`) {
			t.Errorf("resign: %d %s", code, body)
		}
		code, body := send(t, srv, http.MethodGet, "/job?name=act-job", "", userHeader, "alice")
		if code != http.StatusOK {
			t.Fatalf("GET /job: %d\n%s", code, body)
		}
		mustContain(t, body, `id="pause"`, `class="rerun"`, `class="skip"`, "skip-next", "acting as alice")
		// pause through its confirmation page
		action, token := confirmPage(t, srv, "/act?kind=pause&job=act-job", "alice")
		code, body = postForm(t, srv, action, token, "incident 42", userHeader, "alice")
		if code != http.StatusOK || !strings.Contains(body, `id="outcome"`) {
			t.Fatalf("pause: %d\n%s", code, body)
		}
		_, body = send(t, srv, http.MethodGet, "/job?name=act-job", "", userHeader, "alice")
		mustContain(t, body, `id="paused"`, "Paused by alice: incident 42", `id="resume"`, `id="action-log"`)
		_, body, _ = get(t, srv, "/") // read-only for a reader the service names no author for
		mustContain(t, body, `status paused" title="paused by alice: incident 42">paused<`)
		// rerun the failed slot, skip the missed one, through the API
		code, body = postAPI(t, srv, "bob", map[string]string{"kind": "rerun", "job": "act-job", "slot": slot(2).Format(time.RFC3339), "reason": "upstream back"})
		if code != http.StatusOK {
			t.Fatalf("rerun: %d %s", code, body)
		}
		var res apiv1.Action
		if err := json.Unmarshal([]byte(body), &res); err != nil || res.Kind != "rerun" || res.Author != "bob" || res.ID == 0 || res.Slot == nil || !res.Slot.Equal(slot(2)) {
			t.Errorf("rerun answered %s (%v)", body, err)
		}
		if code, body = postAPI(t, srv, "bob", map[string]string{"kind": "skip", "job": "act-job", "slot": slot(1).Format(time.RFC3339), "reason": "no"}); code != http.StatusOK {
			t.Errorf("skip of a missed slot: %d %s", code, body)
		}
		if code, body = postAPI(t, srv, "bob", map[string]string{"kind": "resume", "job": "act-job"}); code != http.StatusOK {
			t.Errorf("resume: %d %s", code, body)
		}
		_, body = send(t, srv, http.MethodGet, "/job?name=act-job", "", userHeader, "alice")
		mustContain(t, body, `id="pause"`, "upstream back", "incident 42", `status rerun">rerun<`, `status skipped">skipped<`)
		if strings.Contains(body, `id="paused"`) {
			t.Error("the resumed job is shown paused")
		}
	})
}

// TestActionOptions: a bad actions option is an error of Handler wrapping
// ormlock.ErrInvalidArgument, before the database is contacted.
func TestActionOptions(t *testing.T) {
	db, err := sql.Open("pgx", "postgres://nobody@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for what, opt := range map[string]webui.Option{
		"nil author":      webui.WithActions(nil),
		"short key":       webui.WithActions(headerAuthor, webui.WithCSRFKey([]byte("short"))),
		"short token TTL": webui.WithActions(headerAuthor, webui.WithTokenTTL(time.Second)),
	} {
		if _, err := webui.Handler(db, opt); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", what, err)
		}
	}
	if _, err := webui.Handler(db, webui.WithActions(headerAuthor, webui.WithCSRFKey(testKey), webui.WithTokenTTL(10*time.Minute))); err != nil {
		t.Errorf("good options: %v", err)
	}
}

// TestViewWithoutControls: a ledger whose controls table and actions log
// do not exist yet (Migrate not run since upgrading) is shown as before,
// with no error, and an action on it says to run Migrate.
func TestViewWithoutControls(t *testing.T) {
	forEachDialect(t, func(t *testing.T, k testdb.Kind, db *sql.DB, table string) {
		ledgertest.InsertRun(t, k, table, "", "old-job", slot(1), "failed", "a", slot(1), time.Second, "boom")
		q := `"`
		if k.Dialect() == "mysql" {
			q = "`"
		}
		for _, suffix := range []string{"_controls", "_actions"} {
			if _, err := db.Exec("DROP TABLE " + q + table + suffix + q); err != nil {
				t.Fatal(err)
			}
		}
		for _, srv := range []*httptest.Server{serve(t, db, webui.WithLedgerTable(table)), serve(t, db, webui.WithLedgerTable(table), webui.WithActions(headerAuthor))} {
			for _, path := range []string{"/", "/job?name=old-job"} {
				code, body := send(t, srv, http.MethodGet, path, "", userHeader, "alice")
				if code != http.StatusOK || strings.Contains(body, `class="error"`) || !strings.Contains(body, "old-job") {
					t.Errorf("GET %s without the controls table: %d\n%s", path, code, body)
				}
			}
		}
		srv := serve(t, db, webui.WithLedgerTable(table), webui.WithActions(headerAuthor))
		if code, body := postAPI(t, srv, "alice", map[string]string{"kind": "pause", "job": "old-job"}); code != http.StatusServiceUnavailable || !strings.Contains(body, "Migrate") {
			t.Errorf("an action without the controls table: %d %s", code, body)
		}
	})
}

// TestActionsEscaping: hostile job names, authors and reasons are inert
// on the confirmation pages, the outcome pages and the job's page with
// its actions log, and the action reaches the job by its exact name.
func TestActionsEscaping(t *testing.T) {
	forEachDialect(t, func(t *testing.T, k testdb.Kind, db *sql.DB, table string) {
		srv := serve(t, db, webui.WithLedgerTable(table), webui.WithActions(headerAuthor, webui.WithCSRFKey(testKey)))
		for i, h := range hostile {
			job := "job " + h
			ledgertest.InsertRun(t, k, table, "", job, slot(1), "failed", "o", slot(1), time.Second, "boom")
			author := "<b>op</b>" + strconv.Itoa(i) // a header cannot carry control characters
			path := "/act?kind=rerun&job=" + url.QueryEscape(job) + "&slot=" + url.QueryEscape(slot(1).Format(time.RFC3339))
			code, body := send(t, srv, http.MethodGet, path, "", userHeader, author)
			if code != http.StatusOK {
				t.Fatalf("GET %s: %d\n%s", path, code, body)
			}
			assertInert(t, "confirmation page of "+strconv.Quote(h), body)
			action, token := confirmPage(t, srv, path, author)
			code, body = postForm(t, srv, action, token, "reason "+h, userHeader, author)
			if code != http.StatusOK || !strings.Contains(body, `id="outcome"`) {
				t.Fatalf("rerun of %q: %d\n%s", job, code, body)
			}
			assertInert(t, "outcome page of "+strconv.Quote(h), body)
			runs, err := sqllock.Runs(t.Context(), db, job, 1, ormlock.WithLedgerTable(table))
			if err != nil || len(runs) != 1 || runs[0].Status != "rerun" {
				t.Errorf("the rerun of %q did not reach its ledger row: %+v %v", job, runs, err)
			}
			_, body = send(t, srv, http.MethodGet, "/job?name="+url.QueryEscape(job), "", userHeader, author)
			assertInert(t, "job page with actions of "+strconv.Quote(h), body)
			if !strings.Contains(body, `id="action-log"`) || !strings.Contains(body, "&lt;b&gt;op&lt;/b&gt;") {
				t.Errorf("the job page of %q lacks its actions log with the author escaped", job)
			}
		}
	})
}
