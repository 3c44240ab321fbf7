package ledger

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock/internal/testdb"
)

// TestTextStatementsUseTheKey: RunOnce's one-message statements, built
// with literals (claimText, doneText), reach the ledger's row through its
// primary key on every key column, on a ledger of a few thousand rows:
// EXPLAIN of the mark done shows an Index Cond naming namespace, job and
// slot (a literal the planner cannot fold to a constant of the column's
// type leaves only slot there, and the key index is scanned, so the
// statement's cost grew with the ledger), and the claim's conflict arbiter
// is the primary key.
func TestTextStatementsUseTheKey(t *testing.T) {
	ctx := context.Background()
	tbl, db := testTable(t, testdb.Postgres, "textplan")
	if _, err := db.ExecContext(ctx, fmt.Sprintf(`INSERT INTO %s (namespace, job, slot, status, owner, started_at, finished_at)
SELECT CASE WHEN g %% 2 = 0 THEN '' ELSE 'tenant' END, 'job-' || (g / 2) %% 40,
	timestamptz '2025-01-01 00:00:00+00' + (g / 80) * interval '1 hour', 'done', 'host/1',
	timestamptz '2025-01-01 00:00:00+00', timestamptz '2025-01-01 00:00:01+00'
FROM generate_series(0, 3999) AS g`, tbl.q)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "ANALYZE "+tbl.q); err != nil {
		t.Fatal(err)
	}
	// the claim that reads the pause flag reaches the ledger's rows
	// through the key too
	if err := CtlOf(tbl).createControls(ctx, db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + tbl.cq + ", " + tbl.aq) })
	slot := time.Date(2025, 1, 1, 7, 0, 0, 0, time.UTC)
	for _, c := range []struct{ ns, job, owner string }{
		{"", "job-7", "host/1"},
		{"tenant", "job-8", "host/1"},
		{`it's \a "job"`, "été/日本/🦀", `o'wner\`},
	} {
		plan := explain(t, db, tbl, statement{query: tbl.sql.doneText(tbl, c.ns, c.job, slot, c.owner)}, "")
		nodes, err := planNodes(plan)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, n := range nodes {
			if n["Node Type"] == "Seq Scan" {
				t.Errorf("%+v: mark done scans the ledger: %s", c, plan)
			}
			cond, _ := n["Index Cond"].(string)
			if n["Index Name"] != tbl.name+"_pkey" || cond == "" {
				continue
			}
			found = true
			for _, col := range []string{"namespace", "job", "slot"} {
				if !strings.Contains(cond, col) {
					t.Errorf("%+v: mark done's Index Cond %q lacks %s: %s", c, cond, col, plan)
				}
			}
		}
		if !found {
			t.Errorf("%+v: mark done does not read the primary key with an Index Cond: %s", c, plan)
		}
		for _, ctl := range []bool{false, true} {
			plan = explain(t, db, tbl, statement{query: tbl.sql.claimText(tbl, c.ns, c.job, slot, c.owner, ctl)}, "")
			if msg := tbl.planProblem(plan, false, ""); msg != "" {
				t.Errorf("%+v: claim (pause flag read: %v): %s: %s", c, ctl, msg, plan)
			}
		}
	}
}

// TestTextLiterals: the literals of RunOnce's one-message statements read
// back as the Go string, whatever standard_conforming_strings says, for
// quotes, backslashes, control characters and non-ASCII text.
func TestTextLiterals(t *testing.T) {
	ctx := context.Background()
	db := testdb.Open(t, testdb.Postgres)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, scs := range []string{"on", "off"} {
		if _, err := conn.ExecContext(ctx, "SET standard_conforming_strings = "+scs); err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"", "plain", "it's", `back\slash`, `\'`, `'\`, "''", "tab\there\nnl\r\x01\x7f",
			"été", "日本語", "🦀 crab", "\u00a0nbsp", "e\u0301", "\U0010FFFD", strings.Repeat("é'\\", 60)} {
			var got string
			if err := conn.QueryRowContext(ctx, "SELECT "+pgText(s)+"::varchar").Scan(&got); err != nil {
				t.Errorf("scs %s: %q as %s: %v", scs, s, pgText(s), err)
				continue
			}
			if got != s {
				t.Errorf("scs %s: %q as %s reads back as %q", scs, s, pgText(s), got)
			}
		}
	}
	if _, err := conn.ExecContext(ctx, "RESET standard_conforming_strings"); err != nil {
		t.Fatal(err)
	}
}
