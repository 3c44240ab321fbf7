package webui_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/sqllock"
	"github.com/ormlock/ormlock/webui"
)

func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }

// pgKinds are the kinds the view is tested on: PostgreSQL directly and
// behind PgBouncer, and MariaDB.
func forEachKind(t *testing.T, f func(t *testing.T, k testdb.Kind)) { testdb.ForEachKind(t, f) }

// ledger is a test's own ledger table, created by sqllock.Migrate on db
// and dropped (with its fence table) when the test ends.
func ledger(t testing.TB, k testdb.Kind, db *sql.DB) string {
	t.Helper()
	table := testdb.Table(t, k, "webui")
	if err := sqllock.Migrate(context.Background(), db, ormlock.WithLedgerTable(table)); err != nil {
		t.Fatal(err)
	}
	return table
}

// insertRun writes a ledger row as the library does (admin SQL, so that
// any value can be written), started at started and lasting d (d < 0: still
// running).
func insertRun(t *testing.T, k testdb.Kind, table, ns, job string, slot time.Time, status, owner string, started time.Time, d time.Duration, errText string) {
	t.Helper()
	admin := testdb.AdminDB(t, k)
	var fin, e any
	if d >= 0 {
		fin = started.Add(d)
	}
	if errText != "" {
		e = errText
	}
	var err error
	if k.Dialect() == "postgres" {
		_, err = admin.Exec(`INSERT INTO "`+table+`" (namespace, job, slot, status, owner, started_at, finished_at, error) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			ns, job, slot, status, owner, started, fin, e)
	} else {
		f := func(v any) any {
			if tm, ok := v.(time.Time); ok {
				return tm.UTC().Format("2006-01-02 15:04:05.000000")
			}
			return v
		}
		_, err = admin.Exec("INSERT INTO `"+table+"` (namespace, job, slot, status, owner, started_at, finished_at, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
			ns, job, f(slot), status, owner, f(started), f(fin), e)
	}
	if err != nil {
		t.Fatalf("insert run: %v", err)
	}
}

// serve returns a test server of webui.Handler(db, opts...).
func serve(t *testing.T, db *sql.DB, opts ...webui.Option) *httptest.Server {
	t.Helper()
	h, err := webui.Handler(db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// get fetches path from srv and returns the status and body.
func get(t *testing.T, srv *httptest.Server, path string) (int, string, http.Header) {
	t.Helper()
	return do(t, srv, http.MethodGet, path, "")
}

func do(t *testing.T, srv *httptest.Server, method, path, host string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
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
	return resp.StatusCode, string(b), resp.Header
}

// mustContain fails unless body has each of wants.
func mustContain(t *testing.T, body string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(body, w) {
			t.Errorf("page lacks %q", w)
		}
	}
	if t.Failed() {
		t.Logf("page:\n%s", body)
	}
}

// lead runs a Lead of key with fencing on db as owner until the test ends,
// and returns once it is elected.
func lead(t *testing.T, k testdb.Kind, db *sql.DB, table string, key ormlock.Key, owner string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	elected := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- sqllock.Lead(ctx, db, key, func(ctx context.Context) error {
			close(elected)
			<-ctx.Done()
			return ctx.Err()
		}, ormlock.WithFencing(), ormlock.WithOwner(owner), ormlock.WithLedgerTable(table))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Lead: %v", err)
		}
	})
	select {
	case <-elected:
	case err := <-done:
		t.Fatalf("Lead returned before it was elected: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("not elected within 30s")
	}
}

// claimRun runs a claim-mode RunOnce of (job, slot) on db as owner, whose
// fn runs until the test ends, and returns once fn runs: its row is
// 'running' and its lock held.
func claimRun(t *testing.T, db *sql.DB, table, job string, slot time.Time, owner string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	running, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- sqllock.RunOnce(ctx, db, job, slot, func(ctx context.Context, _ *sql.Tx) error {
			close(running)
			<-ctx.Done()
			return nil
		}, ormlock.WithClaim(), ormlock.WithOwner(owner), ormlock.WithLedgerTable(table))
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case <-running:
	case err := <-done:
		t.Fatalf("RunOnce returned before fn ran: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("fn did not run within 30s")
	}
}

// slot returns the i-th hourly slot before the current hour.
func slot(i int) time.Time {
	return time.Now().UTC().Truncate(time.Hour).Add(-time.Duration(i) * time.Hour)
}

var _ = fmt.Sprint
