package webui_test

import (
	"database/sql"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/webui"
)

// The ledger of the page-weight test and the benchmark: 10,000 runs of 10
// jobs (a run every minute, one in 17 failed).
const (
	benchRuns = 10000
	benchJobs = 10
)

// maxPageBytes is the weight a page must stay under.
const maxPageBytes = 100 << 10

// TestPageWeight: on a 10,000-run ledger the overview and a job's page,
// with their default parameters, weigh under 100 KB (the stylesheet is
// another 4 KB, cached).
func TestPageWeight(t *testing.T) {
	forEachDialect(t, func(t *testing.T, k testdb.Kind, db *sql.DB, table string) {
		fillBig(t, k, table, benchRuns, benchJobs)
		h, err := webui.Handler(db, webui.WithLedgerTable(table))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{"/", "/job?name=job-0003", "/static/style.css"} {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, localRequest(path))
			if w.Code != http.StatusOK {
				t.Fatalf("GET %s: %d\n%s", path, w.Code, w.Body)
			}
			t.Logf("GET %s: %d bytes", path, w.Body.Len())
			if w.Body.Len() >= maxPageBytes {
				t.Errorf("GET %s weighs %d bytes, want under %d", path, w.Body.Len(), maxPageBytes)
			}
		}
	})
}

// BenchmarkPages renders the first page of a 10,000-run ledger's overview
// and of one job's history, in server time (the handler called directly,
// no network), on each server:
//
//	CI=true go test -run '^$' -bench BenchmarkPages -benchtime 200x ./webui/
func BenchmarkPages(b *testing.B) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
		b.Run(string(k), func(b *testing.B) {
			db := testdb.Open(b, k)
			table := ledger(b, k, db)
			fillBig(b, k, table, benchRuns, benchJobs)
			h, err := webui.Handler(db, webui.WithLedgerTable(table))
			if err != nil {
				b.Fatal(err)
			}
			for _, page := range []struct{ name, path string }{{"overview", "/"}, {"job", "/job?name=job-0003"}} {
				b.Run(page.name, func(b *testing.B) {
					var size int
					for b.Loop() {
						w := httptest.NewRecorder()
						h.ServeHTTP(w, localRequest(page.path))
						if w.Code != http.StatusOK {
							b.Fatalf("GET %s: %d", page.path, w.Code)
						}
						size = w.Body.Len()
					}
					b.ReportMetric(float64(size), "page-bytes")
				})
			}
		})
	}
}

// localRequest is a GET of path as a browser on the same host sends it.
func localRequest(path string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.Host = "localhost:8080"
	return r
}
