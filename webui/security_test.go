package webui_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/ledgertest"
	"github.com/ormlock/ormlock/webui"
)

// hostile values for job names, owners and error texts: markup, script,
// an attribute break-out, control characters and the bidi override U+202E.
var hostile = []string{
	`<script>alert(1)</script>`,
	`"><img src=x onerror=alert(2)>`,
	"\u202Egnp.exe",
	"ctl\x01\x1b[31mred\x7f",
	`' onmouseover='alert(3)`,
	"zw\u200Bj\u2066iso\u2069",
}

// assertInert fails if body carries any hostile value as markup or raw
// control/bidi characters.
func assertInert(t *testing.T, what, body string) {
	t.Helper()
	for _, bad := range []string{"<script", "<img", "\"><img", "' onmouseover='", "\u202E", "\u200B", "\u2066", "\x01", "\x1b", "\x7f"} {
		if strings.Contains(body, bad) {
			i := strings.Index(body, bad)
			t.Errorf("%s carries %q raw: …%s…", what, bad, body[max(i-80, 0):min(i+80, len(body))])
		}
	}
	if strings.Contains(body, "ZgotmplZ") {
		t.Errorf("%s has a value html/template refused (ZgotmplZ)", what)
	}
}

// TestEscaping: job names, owners, error texts and a leader's owner made of
// markup, script, control characters and U+202E are shown as inert text, on
// the overview, the job pages (table and SVG) and the error pages.
func TestEscaping(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := testdb.Open(t, k)
		t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
		table := ledger(t, k, db)
		for i, h := range hostile {
			job := "job " + h
			ledgertest.InsertRun(t, k, table, "", job, slot(2), "done", "owner "+h, slot(2), time.Second, "")
			ledgertest.InsertRun(t, k, table, "", job, slot(1), "failed", h, slot(1), 2*time.Second, "error "+h+"\nline two "+h)
			_ = i
		}
		owner := "<i>lead</i>\u202E"
		ledgertest.Leading(t, db, table, ormlock.Name("<b>leader</b>\u202E"), owner)
		srv := serve(t, db, webui.WithLedgerTable(table), webui.WithLeaders(ormlock.Name("<b>leader</b>\u202E")),
			webui.WithLocks(ormlock.Name("lock \u202E<script>")))
		code, body, _ := get(t, srv, "/")
		if code != http.StatusOK {
			t.Fatalf("GET /: %d\n%s", code, body)
		}
		assertInert(t, "overview", body)
		mustContain(t, body, `job &lt;script&gt;alert(1)&lt;/script&gt;`, `\u202Egnp.exe`, `ctl\u0001\u001B[31mred\u007F`, `&lt;i&gt;lead&lt;/i&gt;`)
		for _, h := range hostile {
			path := "/job?name=" + url.QueryEscape("job "+h)
			code, body, _ := get(t, srv, path)
			if code != http.StatusOK {
				t.Fatalf("GET %s: %d\n%s", path, code, body)
			}
			assertInert(t, "job page of "+strconv.Quote(h), body)
			if !strings.Contains(body, "<title>") || !strings.Contains(body, `<svg class="plot"`) {
				t.Errorf("job page of %q lacks its plot", h)
			}
		}
		for _, path := range []string{"/?tz=" + url.QueryEscape("<script>\u202E"), "/job?name=" + url.QueryEscape("x\xff<script>"), "/?limit=" + url.QueryEscape("<img src=x>")} {
			code, body, _ := get(t, srv, path)
			if code != http.StatusBadRequest {
				t.Errorf("GET %s: %d, want 400", path, code)
			}
			assertInert(t, "400 page of "+path, body)
		}
		// a NUL byte: no PostgreSQL text holds one (400); a MySQL/MariaDB
		// job name may (a page with no runs)
		path := "/job?name=" + url.QueryEscape("x\x00<script>")
		want := http.StatusBadRequest
		if k.Dialect() == "mysql" {
			want = http.StatusOK
		}
		code, body, _ = get(t, srv, path)
		if code != want {
			t.Errorf("GET %s: %d, want %d", path, code, want)
		}
		assertInert(t, "page of "+path, body)
	})
}

// TestParams: a parameter that does not parse is a 400 naming it; a number
// out of range is clamped.
func TestParams(t *testing.T) {
	k := testdb.Postgres
	db := testdb.Open(t, k)
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
	table := ledger(t, k, db)
	for i := 1; i <= 70; i++ {
		ledgertest.InsertRun(t, k, table, "", "many", slot(i), "done", "o", slot(i), time.Second, "")
	}
	srv := serve(t, db, webui.WithLedgerTable(table))
	for path, want := range map[string]string{
		"/?tz=Nowhere/Zone":                   "?tz=Nowhere/Zone",
		"/?tz=Local":                          "?tz=Local",
		"/?limit=abc":                         "?limit=abc",
		"/?limit=1e3":                         "?limit=1e3",
		"/?refresh=soon":                      "?refresh=soon",
		"/?refresh=1.5":                       "?refresh=1.5",
		"/?limit=1&limit=2":                   "?limit= is given 2 times",
		"/job":                                "?name= is missing",
		"/job?name=":                          "?name= is missing",
		"/job?name=%FF":                       "not valid UTF-8",
		"/job?name=nul%00":                    "NUL byte",
		"/job?name=many&tz=Mars":              "?tz=Mars",
		"/?after=" + strings.Repeat("x", 300): "at most 191",
	} {
		code, body, hdr := get(t, srv, path)
		if code != http.StatusBadRequest {
			t.Errorf("GET %s: %d, want 400", path, code)
		}
		if !strings.Contains(body, want) {
			t.Errorf("GET %s: the 400 page does not say %q:\n%s", path, want, body)
		}
		if hdr.Get("Content-Security-Policy") != webui.ContentSecurityPolicy {
			t.Errorf("GET %s: no CSP on the 400 page", path)
		}
	}
	cells := regexp.MustCompile(`class="s done"`)
	for limit, want := range map[string]int{"": 20, "100000": 60, "0": 1, "-5": 1, "7": 7, "99999999999999999999": 60, "-99999999999999999999": 1} {
		code, body, _ := get(t, srv, "/?limit="+limit)
		if code != http.StatusOK {
			t.Fatalf("limit=%s: %d", limit, code)
		}
		// the legend has one cell of each status too
		if n := len(cells.FindAllString(body, -1)) - 1; n != want {
			t.Errorf("limit=%s: %d cells, want %d", limit, n, want)
		}
	}
	code, body, _ := get(t, srv, "/job?name=many&limit=100000")
	if n := strings.Count(body, `<tr id="s`); code != http.StatusOK || n != 70 {
		t.Errorf("job page, limit=100000: %d, %d rows, want 200 and all 70 (limit clamped to 500)", code, n)
	}
	for refresh, want := range map[string]string{"": `content="30"`, "1": `content="5"`, "999999": `content="3600"`, "60": `content="60"`,
		"%2B60": `content="60"`, "99999999999999999999": `content="3600"`} {
		code, body, _ := get(t, srv, "/?refresh="+refresh)
		if code != http.StatusOK || !strings.Contains(body, `<meta http-equiv="refresh" `+want+`>`) {
			t.Errorf("refresh=%s: %d, no meta refresh %s", refresh, code, want)
		}
	}
	// out of range below: clamped to the nearest bound, 0 (off)
	for _, refresh := range []string{"0", "-5", "-99999999999999999999"} {
		if code, body, _ := get(t, srv, "/?refresh="+refresh); code != http.StatusOK || strings.Contains(body, `http-equiv="refresh"`) {
			t.Errorf("refresh=%s: %d, want 200 and no refreshing", refresh, code)
		}
	}
	// links keep the zone and the refresh: the page is shareable as it is
	_, body, _ = get(t, srv, "/?tz=Asia/Tokyo&refresh=10")
	mustContain(t, body, `href="job?name=many&amp;refresh=10&amp;tz=Asia%2FTokyo"`, "JST", `class="self" href="./?refresh=10&amp;tz=Asia%2FTokyo"`)
	// the zone links keep the page
	_, body, _ = get(t, srv, "/job?name=many&tz=Asia/Tokyo&limit=5")
	mustContain(t, body, `<a href="job?limit=5&amp;name=many&amp;tz=UTC">UTC</a>`, `<b>Asia/Tokyo</b>`)
}

// TestMethodsAndHosts: only GET and HEAD are answered (HEAD as GET, without
// the body: uptime checkers send it), and only for the allowed hosts
// (loopback names by default), before the database is touched.
func TestMethodsAndHosts(t *testing.T) {
	k := testdb.Postgres
	db := testdb.Open(t, k)
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
	srv := serve(t, db, webui.WithAllowedHosts("ops.example", "view.example:8443"))
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions, "PROPFIND"} {
		code, _, hdr := do(t, srv, m, "/", "")
		if code != http.StatusMethodNotAllowed || hdr.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s /: %d Allow %q, want 405 Allow GET, HEAD", m, code, hdr.Get("Allow"))
		}
	}
	for path, want := range map[string]int{"/": http.StatusOK, "/static/style.css": http.StatusOK, "/job?name=x": http.StatusOK,
		"/job": http.StatusBadRequest, "/nope": http.StatusNotFound} {
		gcode, gbody, ghdr := get(t, srv, path)
		code, body, hdr := do(t, srv, http.MethodHead, path, "")
		if code != want || gcode != want || body != "" || hdr.Get("Content-Type") != ghdr.Get("Content-Type") ||
			hdr.Get("Content-Security-Policy") != webui.ContentSecurityPolicy {
			t.Errorf("HEAD %s: %d, %d bytes, Content-Type %q; want %d as GET (%d, %q), no body, the CSP", path, code, len(body),
				hdr.Get("Content-Type"), want, gcode, ghdr.Get("Content-Type"))
		}
		if cl := hdr.Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(gbody)) && path == "/static/style.css" {
			t.Errorf("HEAD %s: Content-Length %s, GET's body is %d bytes", path, cl, len(gbody))
		}
	}
	if code, _, _ := do(t, srv, http.MethodHead, "/", "evil.example"); code != http.StatusMisdirectedRequest {
		t.Errorf("HEAD from another host: %d, want 421", code)
	}
	for host, want := range map[string]int{
		"evil.example":        http.StatusMisdirectedRequest,
		"evil.example:80":     http.StatusMisdirectedRequest,
		"127.0.0.2":           http.StatusMisdirectedRequest,
		"view.example:80":     http.StatusMisdirectedRequest,
		"localhost:1234":      http.StatusOK,
		"[::1]:8080":          http.StatusOK,
		"ops.example:8080":    http.StatusOK,
		"OPS.example":         http.StatusOK,
		"view.example:8443":   http.StatusOK,
		"localhost.evil.test": http.StatusMisdirectedRequest,
	} {
		code, _, hdr := do(t, srv, http.MethodGet, "/static/style.css", host)
		if code != want {
			t.Errorf("Host %s: %d, want %d", host, code, want)
		}
		if hdr.Get("Content-Security-Policy") != webui.ContentSecurityPolicy {
			t.Errorf("Host %s: no CSP", host)
		}
	}
	if code, _, _ := get(t, srv, "/nope"); code != http.StatusNotFound {
		t.Errorf("GET /nope: %d", code)
	}
	for _, opts := range [][]webui.Option{
		{webui.WithLedgerTable("bad name")}, {webui.WithNamespace("a:b")}, {webui.WithTimeout(0)},
		{webui.WithAllowedHosts("a/b")}, {webui.WithSchedule("", nil)}, {webui.WithSchedule("j", fakeSchedule{})},
		{webui.WithLocks(ormlock.Name(""))}, {webui.WithTimeZone(nil)},
	} {
		if _, err := webui.Handler(db, opts...); err == nil {
			t.Errorf("Handler with a bad option: no error")
		}
	}
	if _, err := webui.Handler(nil); err == nil {
		t.Error("Handler(nil): no error")
	}
}

type fakeSchedule struct{}

func (fakeSchedule) Slot(t time.Time) time.Time { return t }

// roleDSN creates a login role/user with only SELECT on the shared server
// of k's database and returns a DSN that logs in as it; the role is dropped
// when the test ends (after the pools opened later are closed).
func roleDSN(t *testing.T, k testdb.Kind) string {
	t.Helper()
	admin := testdb.AdminDB(t, k)
	name := fmt.Sprintf("webui_ro_%d", time.Now().UnixNano()%1e9)
	const pw = "ro-pass-1"
	dsn := testdb.DSN(t, k)
	if k.Dialect() == "postgres" {
		for _, q := range []string{
			"CREATE ROLE " + name + " LOGIN PASSWORD '" + pw + "'",
			"GRANT SELECT ON ALL TABLES IN SCHEMA public TO " + name,
		} {
			if _, err := admin.Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		t.Cleanup(func() {
			_, _ = admin.Exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", name)
			_, _ = admin.Exec("DROP OWNED BY " + name)
			_, _ = admin.Exec("DROP ROLE " + name)
		})
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword(name, pw)
		return u.String()
	}
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"%", "127.0.0.1", "localhost"} {
		for _, q := range []string{
			"CREATE USER '" + name + "'@'" + host + "' IDENTIFIED BY '" + pw + "'",
			"GRANT SELECT ON `" + cfg.DBName + "`.* TO '" + name + "'@'" + host + "'",
		} {
			if _, err := admin.Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		t.Cleanup(func() { _, _ = admin.Exec("DROP USER '" + name + "'@'" + host + "'") })
	}
	cfg.User, cfg.Passwd = name, pw
	return cfg.FormatDSN()
}

// TestReadOnly: the whole view, every page and section, served through a
// database user that may only SELECT: it writes nothing. The same user is
// refused a write, so the grant is what the test thinks.
func TestReadOnly(t *testing.T) {
	forEachDialect(t, func(t *testing.T, k testdb.Kind, db *sql.DB, table string) {
		ledgertest.InsertRun(t, k, table, "", "ro-job", slot(2), "done", "a", slot(2), time.Second, "")
		ledgertest.InsertRun(t, k, table, "", "ro-job", slot(1), "failed", "a", slot(1), time.Second, "boom")
		ledgertest.Leading(t, db, table, ormlock.Name("ro-leader"), "ro-owner")
		release := testdb.RawHold(t, k, "", "ro-held")
		defer release()
		dsn := roleDSN(t, k)
		ro, err := sql.Open(k.Driver(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ro.Close() })
		q := "DELETE FROM " + table
		if _, err := ro.Exec(q); err == nil {
			t.Fatal("the SELECT-only user could delete")
		}
		hourly, _ := ormlock.Every(time.Hour, nil)
		srv := serve(t, ro, webui.WithLedgerTable(table), webui.WithSchedule("ro-job", hourly),
			webui.WithLeaders(ormlock.Name("ro-leader")), webui.WithLocks(ormlock.Name("ro-held")))
		code, body, _ := get(t, srv, "/")
		if code != http.StatusOK || strings.Contains(body, `class="error"`) {
			t.Fatalf("GET / as the SELECT-only user: %d\n%s", code, body)
		}
		mustContain(t, body, "ro-job", `status held">leading<`, "ro-owner", `status held">held<`)
		code, body, _ = get(t, srv, "/job?name=ro-job")
		if code != http.StatusOK || !strings.Contains(body, "boom") {
			t.Fatalf("GET /job as the SELECT-only user: %d\n%s", code, body)
		}
		if n := ro.Stats().InUse; n != 0 {
			t.Errorf("%d connections of the view's pool in use", n)
		}
	})
}

// TestDeadline: a database that does not answer (the ledger table locked
// by another session) costs a request its deadline, not more: the page is
// a 503 that says so, and no connection stays in use.
func TestDeadline(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := testdb.Open(t, k)
		t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
		table := ledger(t, k, db)
		ledgertest.InsertRun(t, k, table, "", "slow", slot(1), "done", "a", slot(1), time.Second, "")
		ctx := context.Background()
		conn, err := testdb.AdminDB(t, k).Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if k.Dialect() == "postgres" {
			if _, err := conn.ExecContext(ctx, "BEGIN; LOCK TABLE \""+table+"\" IN ACCESS EXCLUSIVE MODE"); err != nil {
				t.Fatal(err)
			}
			defer conn.ExecContext(ctx, "ROLLBACK")
		} else {
			if _, err := conn.ExecContext(ctx, "LOCK TABLES `"+table+"` WRITE"); err != nil {
				t.Fatal(err)
			}
			defer conn.ExecContext(ctx, "UNLOCK TABLES")
		}
		srv := serve(t, db, webui.WithLedgerTable(table), webui.WithTimeout(time.Second))
		start := time.Now()
		code, body, _ := get(t, srv, "/")
		if took := time.Since(start); took > 15*time.Second {
			t.Errorf("the request took %v with a 1s deadline", took)
		}
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "did not answer within 1s") {
			t.Errorf("GET / on a locked ledger: %d\n%s", code, body)
		}
		// many requests at once take at most a few of the pool's
		// connections, and each ends by its deadline
		var wg sync.WaitGroup
		stop, sampled := make(chan struct{}), make(chan struct{})
		var most int
		go func() {
			defer close(sampled)
			for {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
					most = max(most, db.Stats().InUse)
				}
			}
		}()
		codes := make([]int, 12)
		for i := range codes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := srv.Client().Get(srv.URL + "/job?name=slow")
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				codes[i] = resp.StatusCode
			}()
		}
		wg.Wait()
		close(stop)
		<-sampled
		for i, c := range codes {
			if c != http.StatusServiceUnavailable {
				t.Errorf("request %d: %d, want 503", i, c)
			}
		}
		if most > 4 {
			t.Errorf("%d of the pool's connections in use at once, want at most 4", most)
		}
		if took := time.Since(start); took > 30*time.Second {
			t.Errorf("13 requests with a 1s deadline took %v", took)
		}
	})
}

// TestUnreachable: a server that refuses the connection is shown as
// unreachable, and neither the page nor the log names the DSN, its
// password, user, host or database.
func TestUnreachable(t *testing.T) {
	port, err := testdb.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	for driver, dsn := range map[string]string{
		"pgx":   fmt.Sprintf("postgres://webuser:s3cr3t-pw@127.0.0.1:%d/secretdb?sslmode=disable&connect_timeout=2", port),
		"mysql": fmt.Sprintf("webuser:s3cr3t-pw@tcp(127.0.0.1:%d)/secretdb?timeout=2s", port),
	} {
		t.Run(driver, func(t *testing.T) {
			db, err := sql.Open(driver, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			var logs testdb.SyncBuffer
			srv := serve(t, db, webui.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))), webui.WithLocks(ormlock.Name("x")))
			for _, path := range []string{"/", "/job?name=x"} {
				code, body, _ := get(t, srv, path)
				if code != http.StatusServiceUnavailable || !strings.Contains(body, "cannot reach the database server") || !strings.Contains(body, `http-equiv="refresh"`) {
					t.Errorf("GET %s: %d, want 503 saying so and refreshing\n%s", path, code, body)
				}
				for _, secret := range []string{"s3cr3t", "webuser", "secretdb", strconv.Itoa(port)} {
					if strings.Contains(body, secret) {
						t.Errorf("GET %s: the page names %q", path, secret)
					}
					if strings.Contains(logs.String(), secret) {
						t.Errorf("the log names %q: %s", secret, logs.String())
					}
				}
			}
			if !strings.Contains(logs.String(), "cannot reach the database server") {
				t.Errorf("nothing logged: %q", logs.String())
			}
		})
	}
}

// TestStandby: on a PostgreSQL hot standby the view says the server is
// refused and why, and shows the holders as unknown, never as free.
func TestStandby(t *testing.T) {
	primary := testdb.Start(t, testdb.Postgres)
	standby := primary.StartStandby(t)
	db, err := sql.Open("pgx", standby.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	t.Cleanup(func() { standby.AssertNoLeaks(t, db) })
	srv := serve(t, db, webui.WithLocks(ormlock.Name("standby-lock")))
	code, body, _ := get(t, srv, "/")
	if code != http.StatusOK {
		t.Fatalf("GET /: %d\n%s", code, body)
	}
	mustContain(t, body, "PostgreSQL: refused", "hot standby", `id="locks-error">unknown:`)
	if strings.Contains(body, `status free">free<`) {
		t.Error("a lock on the standby is shown as free")
	}
}

// TestNoQuery: a holder's query text (which can carry secrets) is never
// shown, though the view's user may read it in pg_stat_activity.
func TestNoQuery(t *testing.T) {
	k := testdb.Postgres
	db := testdb.Open(t, k)
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
	ctx := context.Background()
	conn, err := testdb.AdminDB(t, k).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	key := ormlock.Name("webui-query-secret")
	// the holder's last statement carries a secret
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock(-4216125467453618713), 'password=hunter2'"); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(ctx, "SELECT pg_advisory_unlock_all()")
	srv := serve(t, db, webui.WithLocks(key, ormlock.ID(-4216125467453618713)))
	code, body, _ := get(t, srv, "/")
	if code != http.StatusOK || !strings.Contains(body, `status held">held<`) {
		t.Fatalf("GET /: %d, want the lock shown held\n%s", code, body)
	}
	if strings.Contains(body, "hunter2") || strings.Contains(body, "pg_advisory_lock(") {
		t.Errorf("the page shows the holder's query:\n%s", body)
	}
}
