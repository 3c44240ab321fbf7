package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock/internal/testdb"
)

// TestRerunsReadTheLedgerOnlyWhenAsked: a firing's read of the job's
// 'rerun' slots looks up the job's controls row by its key, and reads the
// job's ledger rows (4,000 of them here) only while an operator asked for
// reruns that no firing has seen done: EXPLAIN ANALYZE of the read shows
// the ledger's side never executed when none is asked. A rerun asked is
// found; once none is left, a firing records so (rerun_seen), and the
// next read is the key lookup again. On PostgreSQL and MariaDB.
func TestRerunsReadTheLedgerOnlyWhenAsked(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} { // PgBouncer sends PostgreSQL's statements
		t.Run(string(k), func(t *testing.T) { rerunsReadTheLedgerOnlyWhenAsked(t, k) })
	}
}

func rerunsReadTheLedgerOnlyWhenAsked(t *testing.T, k testdb.Kind) {
	ctx := context.Background()
	tbl, db := testTable(t, k, "reruns")
	if err := CtlOf(tbl).createControls(ctx, db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + tbl.cq + ", " + tbl.aq) })
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	const n = 4000
	var b strings.Builder
	for i := range n {
		if i%500 == 0 {
			if b.Len() > 0 {
				if _, err := db.ExecContext(ctx, b.String()); err != nil {
					t.Fatal(err)
				}
				b.Reset()
			}
			b.WriteString("INSERT INTO " + tbl.q + " (namespace, job, slot, status, owner, started_at) VALUES ")
		} else {
			b.WriteString(", ")
		}
		ts := base.Add(time.Duration(i) * time.Minute).Format("2006-01-02 15:04:05")
		fmt.Fprintf(&b, "('', 'nightly', '%s', 'done', 'h', '%s')", ts, ts)
	}
	if _, err := db.ExecContext(ctx, b.String()); err != nil {
		t.Fatal(err)
	}
	r := Reader{T: tbl, Q: db, DB: db, Controls: true}
	// a row for the job, no rerun asked
	if err := tbl.ctl.recordSchedule(ctx, tbl, db, "", "nightly", "every 1m"); err != nil {
		t.Fatal(err)
	}
	if k == testdb.Postgres {
		plan := explainAnalyze(t, db, tbl.ctl.rerunsSQL(tbl), "", "nightly", MaxReruns)
		if !strings.Contains(plan, "never executed") {
			t.Errorf("with no rerun asked, the read of the reruns ran on the ledger:\n%s", plan)
		}
	}
	if slots, err := r.reruns(ctx, "nightly"); err != nil || len(slots) != 0 {
		t.Fatalf("reruns with none asked: %v, %v", slots, err)
	}
	// an operator's rerun: the row marked, the controls row counts it
	slot := base.Add(17 * time.Minute)
	if err := tbl.ctl.markSlot(ctx, tbl, db, "", "nightly", slot, StatusRerun, "", "", "r.status = 'done'"); err != nil {
		t.Fatal(err)
	}
	if err := tbl.ctl.askRerun(ctx, tbl, db, "", "nightly"); err != nil {
		t.Fatal(err)
	}
	slots, err := r.reruns(ctx, "nightly")
	if err != nil || len(slots) != 1 || !slots[0].Equal(slot) {
		t.Fatalf("reruns with one asked: %v, %v; want [%v]", slots, err, slot)
	}
	// it ran: the next read finds none and records that it saw them
	if _, err := db.ExecContext(ctx, "UPDATE "+tbl.q+" SET status = 'done' WHERE status = 'rerun'"); err != nil {
		t.Fatal(err)
	}
	if slots, err := r.reruns(ctx, "nightly"); err != nil || len(slots) != 0 {
		t.Fatalf("reruns after the rerun ran: %v, %v", slots, err)
	}
	var asked, seen int64
	if err := db.QueryRowContext(ctx, "SELECT rerun_asked, rerun_seen FROM "+tbl.cq).Scan(&asked, &seen); err != nil || asked != 1 || seen != 1 {
		t.Errorf("controls row after the rerun: asked %d, seen %d, %v; want 1 and 1", asked, seen, err)
	}
	if k == testdb.Postgres {
		if plan := explainAnalyze(t, db, tbl.ctl.rerunsSQL(tbl), "", "nightly", MaxReruns); !strings.Contains(plan, "never executed") {
			t.Errorf("after the reruns were seen done, the read of the reruns ran on the ledger:\n%s", plan)
		}
	}
}

// explainAnalyze runs EXPLAIN ANALYZE of query with args on PostgreSQL and
// returns its text.
func explainAnalyze(t *testing.T, db *sql.DB, query string, args ...any) string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), "EXPLAIN ANALYZE "+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}
