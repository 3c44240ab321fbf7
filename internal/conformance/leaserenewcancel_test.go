package conformance_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock/internal/stmtlog"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/sqllock"
)

// TestLeaseRenewalBlockedNoCancel: a renewal blocked on a row lock (a
// transaction holds the lease's row) is ended by the server's lock
// timeout, not by a cancel request of the client (pgx sends one when a
// statement's context ends), which crashes PgBouncer before 1.19.1: the
// server's log shows the lock timeout and no statement cancelled "due to
// user request". On PostgreSQL, whose log is read; the statements are
// the same behind PgBouncer.
func TestLeaseRenewalBlockedNoCancel(t *testing.T) {
	k := testdb.Postgres
	sl := stmtlog.Start(t, k)
	db := sl.OpenPool(t, 4)
	admin := testdb.AdminDB(t, k)
	if err := sqllock.Migrate(context.Background(), db); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	name := "lease-renew-nocancel-" + string(k)
	h := holdLease(t, db, name)
	logged := sl.ErrorsDuring(t, func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		blocker, err := admin.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := blocker.QueryRowContext(ctx, "SELECT COUNT(*) FROM (SELECT epoch FROM ormlock_leases WHERE "+leaseRow(name)+" FOR UPDATE) x").Scan(&n); err != nil || n != 1 {
			t.Fatalf("lock the lease row: %d rows, %v", n, err)
		}
		h.waitCancelled(t)
		if err := blocker.Rollback(); err != nil {
			t.Fatal(err)
		}
		h.waitReturned(t)
	})
	timeouts := 0
	for _, l := range logged {
		if strings.Contains(l, "due to user request") {
			t.Errorf("a statement of the holder was cancelled by the client: %s", l)
		}
		if strings.Contains(l, "lock timeout") {
			timeouts++
		}
	}
	if timeouts == 0 {
		t.Errorf("no renewal ended by the server's lock timeout; errors logged: %q", logged)
	}
	testdb.AssertNoLeaks(t, k)
}
