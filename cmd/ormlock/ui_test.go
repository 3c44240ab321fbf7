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

// TestUI: ormlock ui serves the ledger a RunOnce filled, on the loopback
// address, names neither the DSN nor its password anywhere, and stops on
// SIGTERM with status 0; on every server.
func TestUI(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := gormtest.Open(t, k)
		table := testdb.Table(t, k, "ui")
		if err := gormlock.Migrate(db, ormlock.WithLedgerTable(table)); err != nil {
			t.Fatal(err)
		}
		slot := time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC)
		if err := gormlock.RunOnce(db.WithContext(context.Background()), "ui-job", slot, func(tx *gorm.DB) error { return nil }, ormlock.WithLedgerTable(table), ormlock.WithOwner("ui-owner")); err != nil {
			t.Fatal(err)
		}
		p := start(t, k, "ui", "--listen", "127.0.0.1:0", "--ledger-table", table, "--lock", "ui-lock", "--tz", "Asia/Tokyo")
		p.waitOutput(t, "serving http://", 30*time.Second)
		url := regexp.MustCompile(`http://127\.0\.0\.1:\d+/`).FindString(p.stdout.String())
		if url == "" {
			t.Fatalf("no URL in %q", p.stdout)
		}
		for path, want := range map[string]string{"": ">ui-job<", "job?name=ui-job": "ui-owner"} {
			resp, err := http.Get(url + path)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), want) || !strings.Contains(string(b), "JST") {
				t.Errorf("GET /%s: %d, want 200 with %q in JST:\n%s", path, resp.StatusCode, want, b)
			}
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t, 15*time.Second); code != 0 {
			t.Errorf("exit status %d after SIGTERM\nstderr: %s", code, p.stderr)
		}
		dsn := testdb.DSN(t, k)
		if strings.Contains(p.stdout.String()+p.stderr.String(), dsn) {
			t.Errorf("the output names the DSN:\nstdout: %s\nstderr: %s", p.stdout, p.stderr)
		}
		if strings.Contains(p.stderr.String(), "warning") {
			t.Errorf("a warning on the loopback address: %s", p.stderr)
		}
	})
}

// TestUIFlags: a non-loopback --listen is served with a warning; bad
// flags are usage errors (exit 2) that name the flag.
func TestUIFlags(t *testing.T) {
	k := testdb.Postgres
	p := start(t, k, "ui", "--listen", "0.0.0.0:0")
	p.waitOutput(t, "serving http://", 30*time.Second)
	if !strings.Contains(p.stderr.String(), "warning: --listen 0.0.0.0:0 is not a loopback address") {
		t.Errorf("no warning for 0.0.0.0: %s", p.stderr)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, 15*time.Second); code != 0 {
		t.Errorf("exit status %d after SIGTERM", code)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "nope"}, "--listen"},
		{[]string{"--tz", "Mars/Base"}, "--tz"},
		{[]string{"--schedule", "job"}, "--schedule"},
		{[]string{"--schedule", "job=every day"}, "--schedule"},
		{[]string{"--lock", "id:x"}, "--lock"},
		{[]string{"--timeout", "0s"}, "--timeout"},
		{[]string{"extra"}, "no arguments"},
	} {
		p := start(t, k, append([]string{"ui", "--listen", "127.0.0.1:0"}, c.args...)...)
		if code := p.wait(t, 30*time.Second); code != 2 || !strings.Contains(p.stderr.String(), c.want) {
			t.Errorf("ormlock ui %q: exit %d, stderr %q; want 2 naming %s", c.args, code, p.stderr, c.want)
		}
	}
}
