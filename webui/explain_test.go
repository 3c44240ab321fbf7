package webui_test

import (
	"context"
	"database/sql"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/webui"
)

// bigLedgerRows is the size of the ledger the plans are read on: enough
// rows for the planners to prefer an index whenever one serves. The plan's
// shape is the same at 10 million rows, which take minutes to build:
// ORMLOCK_WEBUI_ROWS=10000000 runs the test at that size (docs/BENCHMARKS.md).
var bigLedgerRows = func() int {
	if n, err := strconv.Atoi(os.Getenv("ORMLOCK_WEBUI_ROWS")); err == nil && n > 0 {
		return n
	}
	return 200000
}()

// fillBig writes n runs of 50 jobs into table, server-side, and analyzes it.
func fillBig(t testing.TB, k testdb.Kind, table string, n, jobs int) {
	t.Helper()
	admin := testdb.AdminDB(t, k)
	var qs []string
	if k.Dialect() == "postgres" {
		qs = []string{
			`INSERT INTO "` + table + `" (namespace, job, slot, status, owner, started_at, finished_at, error)
SELECT '', 'job-' || lpad((g % $JOBS)::text, 4, '0'), timestamptz '2020-01-01 00:00:00+00' + g * interval '1 minute',
       CASE WHEN g % 17 = 0 THEN 'failed' ELSE 'done' END, 'replica-' || (g % 3), timestamptz '2020-01-01 00:00:00+00' + g * interval '1 minute',
       timestamptz '2020-01-01 00:00:01+00' + g * interval '1 minute' + (g % 7) * interval '1 second',
       CASE WHEN g % 17 = 0 THEN 'exit status 1' END
FROM generate_series(1, $N) g`,
			`ANALYZE "` + table + `"`,
		}
	} else {
		qs = []string{
			"INSERT INTO `" + table + "` (namespace, job, slot, status, owner, started_at, finished_at, error)" + `
SELECT '', CONCAT('job-', LPAD(seq % $JOBS, 4, '0')), TIMESTAMP'2020-01-01 00:00:00' + INTERVAL seq MINUTE,
       IF(seq % 17 = 0, 'failed', 'done'), CONCAT('replica-', seq % 3), TIMESTAMP'2020-01-01 00:00:00' + INTERVAL seq MINUTE,
       TIMESTAMP'2020-01-01 00:00:01' + INTERVAL seq MINUTE + INTERVAL (seq % 7) SECOND,
       IF(seq % 17 = 0, 'exit status 1', NULL)
FROM seq_1_to_$N`,
			"ANALYZE TABLE `" + table + "`",
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	for _, q := range qs {
		q = strings.ReplaceAll(strings.ReplaceAll(q, "$JOBS", itoa(jobs)), "$N", itoa(n))
		rows, err := admin.QueryContext(ctx, q) // ANALYZE TABLE returns rows on MariaDB
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		rows.Close()
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestExplainJobs: on a large ledger the listing of a page of jobs reads
// the primary key's index, one entry per job, never the table (no
// sequential scan, no DISTINCT or GROUP BY over it); the overview shows a
// page of them with a link to the next.
func TestExplainJobs(t *testing.T) {
	forEachDialect(t, func(t *testing.T, k testdb.Kind, db *sql.DB, table string) {
		fillBig(t, k, table, bigLedgerRows, 50)
		q := webui.JobsSQL(k.Dialect(), table)
		if k.Dialect() == "postgres" {
			plan := explain(t, k, db, q, "", "", 26)
			t.Logf("plan:\n%s", plan)
			if strings.Contains(plan, "Seq Scan") || strings.Count(plan, "Index Only Scan using "+table+"_pkey") != 2 || strings.Count(plan, "Limit") != 2 {
				t.Errorf("the jobs are not read one index entry per step:\n%s", plan)
			}
			// the pages the whole walk touched (the first Buffers line is
			// the top node's): a few per job, where the table has thousands
			m := regexp.MustCompile(`Buffers: shared hit=(\d+)(?: read=(\d+))?`).FindStringSubmatch(plan)
			if m == nil {
				t.Fatalf("no Buffers in the plan")
			}
			hit, _ := strconv.Atoi(m[1])
			read := 0
			if m[2] != "" {
				read, _ = strconv.Atoi(m[2])
			}
			pages := hit + read
			t.Logf("listing 26 jobs of %d rows touched %d pages", bigLedgerRows, pages)
			if pages > 10*26 {
				t.Errorf("listing 26 jobs touched %d pages", pages)
			}
		} else {
			plan := explain(t, k, db, q, "", "job-0010")
			t.Logf("plan:\n%s", plan)
			if !strings.Contains(plan, "type=range") || !strings.Contains(plan, "key=PRIMARY") || !strings.Contains(plan, "Using index") {
				t.Errorf("a step does not read the primary key's index range:\n%s", plan)
			}
			// what a page of 26 steps reads: one index entry each
			reads := handlerReads(t, db, func(conn *sql.Conn) {
				after := ""
				for range 26 {
					if err := conn.QueryRowContext(context.Background(), q, "", after).Scan(&after); err != nil {
						t.Fatal(err)
					}
				}
			})
			t.Logf("26 steps over %d rows read %d index entries", bigLedgerRows, reads)
			if reads > 2*26 {
				t.Errorf("26 steps read %d index entries, want at most %d", reads, 2*26)
			}
		}
		srv := serve(t, db, webui.WithLedgerTable(table))
		code, body, _ := get(t, srv, "/")
		if code != http.StatusOK || strings.Count(body, `<tr class="job">`) != 25 || !strings.Contains(body, `id="next-jobs"`) {
			t.Fatalf("first page of jobs: %d, %d jobs\n%s", code, strings.Count(body, `<tr class="job">`), body)
		}
		code, body, _ = get(t, srv, "/?after=job-0024")
		if code != http.StatusOK || strings.Count(body, `<tr class="job">`) != 25 || strings.Contains(body, `id="next-jobs"`) || !strings.Contains(body, ">job-0049<") {
			t.Fatalf("second page of jobs: %d, %d jobs\n%s", code, strings.Count(body, `<tr class="job">`), body)
		}
	})
}

// handlerReads returns the index entries MariaDB read (Handler_read_key +
// Handler_read_next) while f ran on one connection.
func handlerReads(t *testing.T, db *sql.DB, f func(conn *sql.Conn)) int64 {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	read := func() int64 {
		var n int64
		rows, err := conn.QueryContext(ctx, "SHOW SESSION STATUS WHERE Variable_name IN ('Handler_read_key', 'Handler_read_next')")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			var v int64
			if err := rows.Scan(&name, &v); err != nil {
				t.Fatal(err)
			}
			n += v
		}
		return n
	}
	before := read()
	f(conn)
	return read() - before
}

// explain returns the plan of q with args, one line per step (MariaDB: one
// "table=... type=... key=..." line per table access).
func explain(t *testing.T, k testdb.Kind, db *sql.DB, q string, args ...any) string {
	t.Helper()
	prefix := "EXPLAIN "
	if k.Dialect() == "postgres" {
		prefix = "EXPLAIN (ANALYZE, VERBOSE, BUFFERS) "
	}
	rows, err := db.Query(prefix+q, args...)
	if err != nil {
		t.Fatalf("EXPLAIN: %v", err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var b strings.Builder
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		if len(cols) == 1 {
			b.WriteString(vals[0].String + "\n")
			continue
		}
		for i, c := range cols {
			v := "<nil>"
			if vals[i].Valid {
				v = vals[i].String
			}
			b.WriteString(c + "=" + v + " ")
		}
		b.WriteString("\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
