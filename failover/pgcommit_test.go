package failover_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/sqllock"
)

// TestPGSyncCommitWaitCancelled freezes the link to the synchronous
// standby while a Transaction commits: the primary has committed locally
// and waits for the standby's flush, which never comes. The COMMIT's
// deadline (the verb's ctx) cancels that wait; PostgreSQL then warns that
// the transaction "has already committed locally, but might not have been
// replicated", and the verb must say ErrCommitUnknown, never success: a
// promotion now would lose a commit the caller was told of.
func TestPGSyncCommitWaitCancelled(t *testing.T) {
	topology(t)
	r := testdb.StartPGReplication(t, true)
	db := openFront(t, r)
	if _, err := db.Exec("CREATE TABLE marks (id int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	r.Link.Freeze()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	err := sqllock.Transaction(ctx, db, "sync-commit", func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO marks VALUES (1)")
		return err
	})
	t.Logf("figure: COMMIT waiting for a frozen synchronous standby, ctx deadline 2s: returned after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if !errors.Is(err, ormlock.ErrCommitUnknown) {
		t.Errorf("Transaction: %v, want ErrCommitUnknown", err)
	}
	count := func() int {
		var n int
		if err := r.Primary.DB(t).QueryRow("SELECT count(*) FROM marks").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waiting := count()
	// Once the standby receives the WAL again, the wait ends and the row
	// shows: the commit the caller was not told of happened.
	r.Link.Thaw()
	r.WaitReplayed(t)
	deadline := time.Now().Add(10 * time.Second)
	for count() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	after := count()
	t.Logf("figure: the row is visible on the primary: %d while the standby was frozen, %d once it caught up", waiting, after)
	if after != 1 {
		t.Errorf("the row committed locally is not there once the standby caught up (%d rows): the test did not reach the wait it means to cancel", after)
	}
}
