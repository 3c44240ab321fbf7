package ledger

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/testdb"
)

// Ledger layout of the plan test: planRows(dialect) rows, two namespaces (the
// empty one and 'tenant'), planJobs jobs, one slot an hour from planEpoch, statuses
// mostly 'done', some 'failed', a few 'running'. Big enough that a
// sequential scan costs the planner more than the primary key's index for
// every statement, small enough to load in a second or two. PostgreSQL needs
// the larger ledger: below about 300,000 rows it joins a Prune batch's 1,000
// keys to the table by hashing a sequential scan, cheaper there than 1,000
// index probes (at 40,000 rows it does).
const planJobs = 40

func planRows(pg bool) int {
	if pg {
		return 400000
	}
	return 40000
}

var planEpoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// loadPlanLedger bulk-loads the plan test's rows into tbl on db with one
// INSERT ... SELECT, then refreshes the planner's statistics. Row g has
// namespace g%2, job (g/2)%planJobs and slot planEpoch + g/(2*planJobs)
// hours: every (namespace, job, slot) once.
func loadPlanLedger(t *testing.T, db *sql.DB, tbl *Table) {
	t.Helper()
	ctx := context.Background()
	per := 2 * planJobs
	var load, analyze string
	if tbl.pg() {
		load = fmt.Sprintf(`INSERT INTO %s (namespace, job, slot, status, owner, started_at, finished_at, error)
SELECT CASE WHEN g %% 2 = 0 THEN '' ELSE 'tenant' END,
	'job-' || (g / 2) %% %d,
	timestamptz '2025-01-01 00:00:00+00' + (g / %d) * interval '1 hour',
	CASE WHEN g %% 1009 = 0 THEN 'running' WHEN g %% 97 = 0 THEN 'failed' ELSE 'done' END,
	'host-' || g %% 3 || '/1',
	timestamptz '2025-01-01 00:00:00+00' + (g / %d) * interval '1 hour' + interval '1 second',
	CASE WHEN g %% 1009 = 0 THEN NULL ELSE timestamptz '2025-01-01 00:00:00+00' + (g / %d) * interval '1 hour' + interval '3 seconds' END,
	CASE WHEN g %% 97 = 0 AND g %% 1009 <> 0 THEN 'boom' END
FROM generate_series(0, %d) AS g`, tbl.q, planJobs, per, per, per, planRows(true)-1)
		analyze = "ANALYZE " + tbl.q
	} else {
		load = fmt.Sprintf("INSERT INTO %s (namespace, job, slot, status, owner, started_at, finished_at, error)"+`
SELECT IF(seq %% 2 = 0, '', 'tenant'),
	CONCAT('job-', (seq DIV 2) %% %d),
	TIMESTAMP'2025-01-01 00:00:00' + INTERVAL (seq DIV %d) HOUR,
	CASE WHEN seq %% 1009 = 0 THEN 'running' WHEN seq %% 97 = 0 THEN 'failed' ELSE 'done' END,
	CONCAT('host-', seq %% 3, '/1'),
	TIMESTAMP'2025-01-01 00:00:01' + INTERVAL (seq DIV %d) HOUR,
	IF(seq %% 1009 = 0, NULL, TIMESTAMP'2025-01-01 00:00:03' + INTERVAL (seq DIV %d) HOUR),
	IF(seq %% 97 = 0 AND seq %% 1009 <> 0, 'boom', NULL)
FROM seq_0_to_%d`, tbl.q, planJobs, per, per, per, planRows(false)-1)
		analyze = "ANALYZE TABLE " + tbl.q
	}
	if _, err := db.ExecContext(ctx, load); err != nil {
		t.Fatalf("load the ledger: %v", err)
	}
	if _, err := db.ExecContext(ctx, analyze); err != nil {
		t.Fatalf("analyze the ledger: %v", err)
	}
}

// statement is one statement the ledger ran, with its arguments.
type statement struct {
	query string
	args  []any
}

// TestLedgerPlans loads a ledger the planner must treat as big (400,000 rows
// on PostgreSQL, 40,000 on MariaDB; ANALYZEd), runs RunOnce's statements (claim, the MySQL read-back, finish,
// abandon), Runs and Prune through a pool that records what they send, and
// checks with EXPLAIN (FORMAT JSON) — the same text and arguments — that
// each uses the primary key (namespace, job, slot) it was written for: no
// sequential scan of the ledger, and Runs reads its rows in index order
// (no sort) and, run with EXPLAIN ANALYZE, touches a number of rows and
// pages bounded by its limit, not by the ledger's size.
func TestLedgerPlans(t *testing.T) {
	// PgBouncer is left out: the PostgreSQL behind it plans the same.
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
		t.Run(string(k), func(t *testing.T) { testLedgerPlans(t, k) })
	}
}

func testLedgerPlans(t *testing.T, k testdb.Kind) {
	ctx := context.Background()
	tbl, db := testTable(t, k, "plan")
	if err := tbl.upgrade(ctx, db); err != nil { // the index on (namespace, slot), as Migrate adds it
		t.Fatal(err)
	}
	loadPlanLedger(t, db, tbl)

	var (
		mu   sync.Mutex
		seen []statement
	)
	rec := wrappedDB(t, k, &lossy{seen: func(query string, args []driver.NamedValue) {
		st := statement{query: query}
		for _, a := range args {
			st.args = append(st.args, a.Value)
		}
		mu.Lock()
		seen = append(seen, st)
		mu.Unlock()
	}})
	take := func() []statement {
		mu.Lock()
		defer mu.Unlock()
		s := seen
		seen = nil
		return s
	}
	// one statement of the ledger's, the last recorded with prefix
	last := func(what, prefix string) statement {
		t.Helper()
		ss := take()
		for i := len(ss) - 1; i >= 0; i-- {
			if strings.HasPrefix(strings.TrimSpace(ss[i].query), prefix) {
				return ss[i]
			}
		}
		t.Fatalf("%s: no statement starting with %q recorded among %d", what, prefix, len(ss))
		return statement{}
	}

	const job, owner = "job-7", "plan-test/1"
	slot := planEpoch.Add(300 * time.Hour) // a 'done' slot of job-7 in the loaded range is at whole hours; this one is free in namespace ''
	slot = slot.Add(30 * time.Minute)

	type check struct {
		what  string
		st    statement
		sort  bool   // must read in index order, no sort step
		index string // the index it must use, if not the primary key
	}
	var checks []check

	started, ok, err := tbl.claim(ctx, rec, "", job, slot, owner, false)
	if err != nil || !ok {
		t.Fatalf("claim: ok=%v err=%v", ok, err)
	}
	ss := take()
	for _, st := range ss {
		q := strings.TrimSpace(st.query)
		switch {
		case strings.HasPrefix(q, "INSERT") && tbl.pg():
			checks = append(checks, check{what: "RunOnce claim (INSERT ... ON CONFLICT)", st: st})
		case strings.HasPrefix(q, "SELECT"):
			checks = append(checks, check{what: "RunOnce claim read-back", st: st})
		}
	}
	if err := tbl.finish(ctx, rec, "", job, slot, owner, started, StatusDone, ""); err != nil {
		t.Fatalf("finish: %v", err)
	}
	checks = append(checks, check{what: "RunOnce finish (UPDATE)", st: last("finish", "UPDATE")})
	if err := tbl.abandon(ctx, rec, "", job, slot, owner, "plan"); err != nil {
		t.Fatalf("abandon: %v", err)
	}
	checks = append(checks, check{what: "RunOnce abandon (UPDATE)", st: last("abandon", "UPDATE")})
	runs, err := tbl.Runs(ctx, rec, "", job, 50)
	if err != nil || len(runs) != 50 {
		t.Fatalf("Runs: %d runs, err %v", len(runs), err)
	}
	runsSt := last("Runs", "SELECT")
	checks = append(checks, check{what: "Runs", st: runsSt, sort: true})
	if _, ok, err := tbl.row(ctx, rec, "", job, slot); err != nil || !ok {
		t.Fatalf("read a run again: %v, %v", ok, err)
	}
	checks = append(checks, check{what: "a run read again (MarkStale)", st: last("read a run again", "SELECT")})
	// the catch-up's read: the server's clock and a day of one job's rows
	if _, taken, err := tbl.taken(ctx, rec, "", job, planEpoch.Add(100*time.Hour), planEpoch.Add(124*time.Hour)); err != nil || len(taken) == 0 {
		t.Fatalf("catch-up read: %d slots, err %v", len(taken), err)
	}
	checks = append(checks, check{what: "catch-up read (SELECT ... LEFT JOIN)", st: last("catch-up read", "SELECT")})
	// Prune the oldest day of the empty namespace: under a thousand rows,
	// one of them 'running' with its lock free (stale).
	if n, err := tbl.Prune(ctx, rec, config.New(), planEpoch.Add(24*time.Hour), PruneBatch); err != nil || n == 0 {
		t.Fatalf("Prune: %d rows, %v", n, err)
	}
	pruned := take()
	find := func(what, prefix, part string) statement {
		t.Helper()
		for i := len(pruned) - 1; i >= 0; i-- {
			if q := strings.TrimSpace(pruned[i].query); strings.HasPrefix(q, prefix) && strings.Contains(q, part) {
				return pruned[i]
			}
		}
		t.Fatalf("%s: no statement starting with %q and containing %q recorded among %d", what, prefix, part, len(pruned))
		return statement{}
	}
	checks = append(checks,
		check{what: "Prune batch (DELETE)", st: find("Prune", "DELETE", "status <> 'running'"), index: tbl.IndexName()},
		check{what: "Prune's read of running rows (SELECT)", st: find("Prune", "SELECT", "status = 'running'"), index: tbl.IndexName()},
		check{what: "Prune of a stale row (DELETE)", st: find("Prune", "DELETE", "owner = ")})

	for _, c := range checks {
		plan := explain(t, db, tbl, c.st, "")
		if msg := tbl.planProblem(plan, c.sort, c.index); msg != "" {
			t.Errorf("%s: %s\nstatement: %s\nplan: %s", c.what, msg, c.st.query, plan)
		} else if testing.Verbose() {
			t.Logf("%s: uses its index\nplan: %s", c.what, plan)
		}
	}

	// Runs(job, 50), executed: rows and pages bounded by the limit.
	an := explain(t, db, tbl, runsSt, "analyze")
	if msg := tbl.runsReadProblem(an, 50); msg != "" {
		t.Errorf("Runs executed: %s\nplan: %s", msg, an)
	}
}

// explain returns the JSON plan of st on db: EXPLAIN (FORMAT JSON), or with
// mode "analyze" EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) on PostgreSQL and
// ANALYZE FORMAT=JSON on MariaDB, which run the statement (used only for
// the read-only Runs).
func explain(t *testing.T, db *sql.DB, tbl *Table, st statement, mode string) string {
	t.Helper()
	prefix := "EXPLAIN (FORMAT JSON) "
	switch {
	case tbl.pg() && mode == "analyze":
		prefix = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
	case !tbl.pg() && mode == "analyze":
		prefix = "ANALYZE FORMAT=JSON "
	case !tbl.pg():
		prefix = "EXPLAIN FORMAT=JSON "
	}
	var plan string
	if err := db.QueryRowContext(context.Background(), prefix+st.query, st.args...).Scan(&plan); err != nil {
		t.Fatalf("%s%s: %v", prefix, st.query, err)
	}
	return plan
}

// planNodes returns every JSON object of plan, depth first.
func planNodes(plan string) ([]map[string]any, error) {
	var root any
	if err := json.Unmarshal([]byte(plan), &root); err != nil {
		return nil, err
	}
	var out []map[string]any
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			out = append(out, v)
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(root)
	return out, nil
}

// planProblem says what is wrong with a plan of a ledger statement, or "":
// the ledger table must be read through its primary key (PostgreSQL: an
// index scan of <table>_pkey, or the conflict arbiter of an INSERT;
// MariaDB: key PRIMARY, never a full scan) or, when index is not "", through
// that index (Prune's batch: the index on (namespace, slot), which reads
// only the rows before the cutoff where the primary key would read the
// whole namespace), and with needOrder without a sort step.
func (tbl *Table) planProblem(plan string, needOrder bool, index string) string {
	nodes, err := planNodes(plan)
	if err != nil {
		return "unreadable plan: " + err.Error()
	}
	pkey, want := tbl.name+"_pkey", "the primary key (namespace, job, slot)"
	if !tbl.pg() {
		pkey = "PRIMARY"
	}
	if index != "" {
		pkey, want = index, "the index "+index+" on (namespace, slot)"
	}
	usesKey := false
	for _, n := range nodes {
		if tbl.pg() {
			typ, _ := n["Node Type"].(string)
			rel, _ := n["Relation Name"].(string)
			if typ == "Seq Scan" && rel == tbl.name {
				return "a sequential scan of the ledger"
			}
			if typ == "Sort" && needOrder {
				return "a sort step: the rows are not read in index order"
			}
			if idx, _ := n["Index Name"].(string); idx == pkey {
				usesKey = true
			}
			if arb, ok := n["Conflict Arbiter Indexes"].([]any); ok && len(arb) == 1 && arb[0] == pkey {
				usesKey = true
			}
			continue
		}
		if name, _ := n["table_name"].(string); name == tbl.name {
			if at, _ := n["access_type"].(string); at == "ALL" || at == "index" {
				return "access_type " + at + ": a full scan of the ledger"
			}
			if key, _ := n["key"].(string); key == pkey {
				usesKey = true
			}
		}
		if _, ok := n["filesort"]; ok && needOrder {
			return "a filesort: the rows are not read in index order"
		}
	}
	if !usesKey {
		return want + " is not used"
	}
	return ""
}

// runsReadProblem checks an executed plan of Runs(job, limit): the rows read
// from the ledger (PostgreSQL: actual rows of the index scan; MariaDB:
// r_rows) at most limit+1, and on PostgreSQL at most 10 buffer pages for
// 50 rows of one job (the index pages down to the leaf, and the heap pages
// the rows are on: the loaded rows of one job lie 80 rows apart).
func (tbl *Table) runsReadProblem(plan string, limit int) string {
	nodes, err := planNodes(plan)
	if err != nil {
		return "unreadable plan: " + err.Error()
	}
	for _, n := range nodes {
		if tbl.pg() {
			if idx, _ := n["Index Name"].(string); idx != tbl.name+"_pkey" {
				continue
			}
			rows, _ := n["Actual Rows"].(float64)
			hit, _ := n["Shared Hit Blocks"].(float64)
			read, _ := n["Shared Read Blocks"].(float64)
			if rows > float64(limit+1) {
				return fmt.Sprintf("the index scan read %v rows for a limit of %d", rows, limit)
			}
			if pages := hit + read; pages > float64(limit+10) {
				return fmt.Sprintf("the index scan touched %v pages for %v rows", pages, rows)
			}
			return ""
		}
		if name, _ := n["table_name"].(string); name == tbl.name {
			rows, _ := n["r_rows"].(float64)
			if rows > float64(limit+1) {
				return fmt.Sprintf("read %v rows for a limit of %d", rows, limit)
			}
			return ""
		}
	}
	return "no read of the ledger through its primary key in the executed plan"
}
