package webui_test

import (
	"context"
	"database/sql"
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

// forEachDialect runs f as a subtest on PostgreSQL and on MariaDB, each
// with a new pool, checked for leaks when the subtest ends, and the
// subtest's own ledger table.
func forEachDialect(t *testing.T, f func(t *testing.T, k testdb.Kind, db *sql.DB, table string)) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
		t.Run(string(k), func(t *testing.T) {
			db := testdb.Open(t, k)
			t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
			f(t, k, db, ledger(t, k, db))
		})
	}
}

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

// slot returns the i-th hourly slot before the current hour.
func slot(i int) time.Time {
	return time.Now().UTC().Truncate(time.Hour).Add(-time.Duration(i) * time.Hour)
}

var _ = fmt.Sprint
