package lockproto_test

import (
	"context"
	"testing"

	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

// TestFenceIssueDurable checks that the PostgreSQL issuance raises
// synchronous_commit to local for its own transaction when the session has
// it off (the test servers run with synchronous_commit=off), so the token's
// COMMIT waits for the WAL flush whatever the session's setting, and leaves
// a setting that is on alone.
func TestFenceIssueDurable(t *testing.T) {
	ctx := context.Background()
	db := testdb.Open(t, testdb.Postgres)
	t.Cleanup(func() { testdb.AssertNoLeaks(t, testdb.Postgres, db) })
	ft, err := lockproto.NewFenceTable(lockproto.Postgres, "fence_durable")
	if err != nil {
		t.Fatal(err)
	}
	if err := ft.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE " + ft.Name()) })
	for _, c := range []struct{ session, want string }{{"off", "local"}, {"on", "on"}, {"remote_write", "remote_write"}} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec("SET LOCAL synchronous_commit = " + c.session); err != nil {
			t.Fatal(err)
		}
		var pid uint32
		if err := tx.QueryRow("SELECT pg_backend_pid() FROM (SELECT pg_try_advisory_xact_lock(4242)) l").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		tok, err := ft.Issue(ctx, tx, "", "name:durable", lockproto.Holder{PID: pid, Key: keys.PostgresKey{Int64: 4242}})
		if err != nil {
			t.Fatal(err)
		}
		var got string
		if err := tx.QueryRow("SHOW synchronous_commit").Scan(&got); err != nil {
			t.Fatal(err)
		}
		_ = tx.Rollback()
		if got != c.want {
			t.Errorf("session %s: synchronous_commit after issuing token %d = %q, want %q", c.session, tok, got, c.want)
		}
	}
}
