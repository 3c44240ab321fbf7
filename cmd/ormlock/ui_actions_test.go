package main_test

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/gormtest"
)

// TestUIActions: ormlock ui is read-only by default (every POST 405);
// --actions-author-header is refused unless it listens on loopback, and
// on loopback takes the author from the header only (without it, 403 and
// no form).
func TestUIActions(t *testing.T) {
	k := testdb.Postgres
	db, _ := gormtest.Open(t, k)
	table := testdb.Table(t, k, "uiact")
	if err := gormlock.Migrate(db, ormlock.WithLedgerTable(table)); err != nil {
		t.Fatal(err)
	}
	slot := time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC)
	if err := gormlock.RunOnce(db.WithContext(context.Background()), "uiact-job", slot, func(tx *gorm.DB) error { return nil }, ormlock.WithLedgerTable(table)); err != nil {
		t.Fatal(err)
	}
	for _, listen := range []string{"0.0.0.0:0", "10.1.2.3:0", ":0"} {
		p := start(t, k, "ui", "--listen", listen, "--actions-author-header", "X-Forwarded-User")
		if code := p.wait(t, 30*time.Second); code != 2 || !strings.Contains(p.stderr.String(), "--actions-author-header needs a loopback --listen") {
			t.Errorf("--listen %s with --actions-author-header: exit %d, stderr %q", listen, code, p.stderr)
		}
	}
	request := func(method, url, body string, headers ...string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	serveUI := func(args ...string) (string, func()) {
		p := start(t, k, append([]string{"ui", "--listen", "127.0.0.1:0", "--ledger-table", table}, args...)...)
		p.waitOutput(t, "serving http://", 30*time.Second)
		url := regexp.MustCompile(`http://127\.0\.0\.1:\d+/`).FindString(p.stdout.String())
		if url == "" {
			t.Fatalf("no URL in %q", p.stdout)
		}
		return url, func() {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			if code := p.wait(t, 15*time.Second); code != 0 {
				t.Errorf("exit status %d after SIGTERM\nstderr: %s", code, p.stderr)
			}
		}
	}
	json := `{"kind":"pause","job":"uiact-job","reason":"r"}`
	url, stop := serveUI()
	if !strings.Contains(url, "127.0.0.1") {
		t.Fatal(url)
	}
	for _, path := range []string{"act?kind=pause&job=uiact-job", "api/v1/actions"} {
		if code, body := request(http.MethodPost, url+path, json, "Content-Type", "application/json", "X-Ormlock-Action", "1", "X-Forwarded-User", "alice"); code != http.StatusMethodNotAllowed {
			t.Errorf("read-only ormlock ui: POST /%s: %d\n%s", path, code, body)
		}
	}
	if code, _ := request(http.MethodGet, url+"act?kind=pause&job=uiact-job", "", "X-Forwarded-User", "alice"); code != http.StatusNotFound {
		t.Errorf("read-only ormlock ui: GET /act: %d, want 404", code)
	}
	stop()

	url, stop = serveUI("--actions-author-header", "X-Forwarded-User")
	defer stop()
	if code, body := request(http.MethodGet, url+"act?kind=pause&job=uiact-job", ""); code != http.StatusForbidden || strings.Contains(body, "<form") {
		t.Errorf("GET /act without the author header: %d\n%s", code, body)
	}
	if code, body := request(http.MethodGet, url+"act?kind=pause&job=uiact-job", "", "X-Forwarded-User", "alice"); code != http.StatusOK || !strings.Contains(body, "<form") || !strings.Contains(body, "acting as <b>alice</b>") {
		t.Errorf("GET /act as alice: %d\n%s", code, body)
	}
	if code, body := request(http.MethodPost, url+"api/v1/actions", json, "Content-Type", "application/json", "X-Ormlock-Action", "1"); code != http.StatusForbidden {
		t.Errorf("POST /api/v1/actions without the author header: %d\n%s", code, body)
	}
	if code, body := request(http.MethodPost, url+"api/v1/actions", json, "Content-Type", "application/json", "X-Ormlock-Action", "1", "X-Forwarded-User", "alice"); code != http.StatusOK || !strings.Contains(body, `"author":"alice"`) {
		t.Errorf("POST /api/v1/actions as alice: %d\n%s", code, body)
	}
	cs, err := gormlock.Controls(db, ormlock.WithLedgerTable(table))
	if err != nil || len(cs) != 1 || !cs[0].Paused || cs[0].Author != "alice" {
		t.Errorf("after the pause: controls %+v, %v", cs, err)
	}
}
