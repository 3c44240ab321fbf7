package ledger

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

// The row-level edges of the ledger statements, on each server, without a
// lock around them (the verbs' tests cover the lock): a claim takes over a
// running or failed row but never a done one; a finish whose claim was taken
// over is ErrLockLost and writes nothing; abandon touches only its owner's
// running row; namespaces never meet.
func TestTableClaimEdges(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		tbl, db := testTable(t, k, "edges")
		job, slot := "edges", testdb.Slot(2)
		status := func(ns string) (string, string) {
			t.Helper()
			runs, err := tbl.Runs(ctx, db, ns, job, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(runs) != 1 {
				t.Fatalf("namespace %q: %d rows, want 1: %+v", ns, len(runs), runs)
			}
			return runs[0].Status, runs[0].Owner
		}
		claim := func(ns, owner string) (time.Time, bool) {
			t.Helper()
			started, ok, err := tbl.claim(ctx, db, ns, job, slot, owner)
			if err != nil {
				t.Fatalf("claim by %s: %v", owner, err)
			}
			return started, ok
		}

		startedA, ok := claim("", "a")
		if !ok {
			t.Fatal("the first claim was refused")
		}
		// A running row left by a (dead) owner is taken over: the lock, not
		// the row, tells a live run from a dead one.
		time.Sleep(2 * time.Millisecond) // a started_at of its own, even at the server's clock resolution
		startedB, ok := claim("", "b")
		if !ok {
			t.Fatal("a running row was not taken over")
		}
		if s, o := status(""); s != StatusRunning || o != "b" {
			t.Fatalf("after the takeover: %s by %s", s, o)
		}
		// a's finish finds its claim gone: ErrLockLost, and b's row untouched.
		if err := tbl.finish(ctx, db, "", job, slot, "a", startedA, StatusDone, ""); !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("finish of a claim taken over: %v, want ErrLockLost", err)
		}
		// abandon by another owner does nothing; b's own marks it failed.
		if err := tbl.abandon(ctx, db, "", job, slot, "a", "x"); err != nil {
			t.Fatal(err)
		}
		if s, _ := status(""); s != StatusRunning {
			t.Fatalf("abandon by another owner changed the row: %s", s)
		}
		if err := tbl.abandon(ctx, db, "", job, slot, "b", "interrupted"); err != nil {
			t.Fatal(err)
		}
		if s, o := status(""); s != StatusFailed || o != "b" {
			t.Fatalf("after b's abandon: %s by %s", s, o)
		}
		// b's finish after its abandon: the claim is no longer running.
		if err := tbl.finish(ctx, db, "", job, slot, "b", startedB, StatusDone, ""); !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("finish after abandon: %v, want ErrLockLost", err)
		}
		// A failed row is taken over, and once done it is never claimed again.
		startedC, ok := claim("", "c")
		if !ok {
			t.Fatal("a failed row was not taken over")
		}
		if err := tbl.finish(ctx, db, "", job, slot, "c", startedC, StatusDone, ""); err != nil {
			t.Fatal(err)
		}
		if _, ok := claim("", "d"); ok {
			t.Fatal("a done row was claimed")
		}
		if s, o := status(""); s != StatusDone || o != "c" {
			t.Fatalf("after the refused claim: %s by %s", s, o)
		}
		if err := tbl.abandon(ctx, db, "", job, slot, "c", "late"); err != nil {
			t.Fatal(err)
		}
		if s, _ := status(""); s != StatusDone {
			t.Fatalf("abandon changed a done row: %s", s)
		}
		// Another namespace: its own row, claimed afresh.
		if _, ok := claim("tenant-2", "c"); !ok {
			t.Fatal("the same job and slot in another namespace was refused")
		}
		if s, _ := status("tenant-2"); s != StatusRunning {
			t.Fatalf("namespace tenant-2: %s", s)
		}
		testdb.AssertNoLeaks(t, k, db)
	})
}

// testTable creates a ledger table of its own for the test on k's server,
// and returns it with a pool on that server.
func testTable(t *testing.T, k testdb.Kind, prefix string) (*Table, *sql.DB) {
	t.Helper()
	d := lockproto.Postgres
	if k == testdb.MariaDB {
		d = lockproto.MySQL
	}
	tbl, err := NewTable(d, testdb.Table(t, k, prefix))
	if err != nil {
		t.Fatal(err)
	}
	db := testdb.Open(t, k)
	if _, err := db.ExecContext(context.Background(), tbl.CreateSQL()); err != nil {
		t.Fatalf("create the ledger table: %v", err)
	}
	return tbl, db
}
