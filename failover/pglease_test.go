package failover_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/sqllock"
)

// TestPGLeaseSyncFailover: with synchronous replication every grant a
// client was told of is on the standby, so after a promotion the epochs
// keep growing; a holder whose lease spans the failover keeps it (its
// renewals reach the promoted server through the moved address, where the
// row is), and nobody else is granted it meanwhile.
func TestPGLeaseSyncFailover(t *testing.T) {
	topology(t)
	r := testdb.StartPGReplication(t, true)
	db := openFront(t, r)
	ctx := context.Background()
	if err := sqllock.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	lease := ormlock.WithLease(8 * time.Second)
	var before []int64
	for range 3 {
		e, _, err := epochOf(t, db, "pg-sync-lease", lease)
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, e)
	}
	h := hold(t, db, "pg-sync-held", lease)

	r.Primary.StopImmediate(t)
	r.Promote(t)
	r.SwitchFront()
	db.SetMaxIdleConns(0)
	db.SetMaxIdleConns(2)

	after, _, err := epochOf(t, db, "pg-sync-lease", lease)
	if err != nil {
		t.Fatal(err)
	}
	_, _, errHeld := epochOf(t, db, "pg-sync-held", lease)
	time.Sleep(10 * time.Second) // beyond the TTL: renewed on the promoted server
	t.Logf("figure: PostgreSQL synchronous failover: epochs %v before the promotion, %d after; a lease held across it lost: %v",
		before, after, h.Lost())
	if after <= before[len(before)-1] {
		t.Errorf("epoch after the promotion %d, want above %d", after, before[len(before)-1])
	}
	if !errors.Is(errHeld, ormlock.ErrNotAcquired) {
		t.Errorf("taking the lease held across the failover: %v, want ErrNotAcquired", errHeld)
	}
	if h.Lost() {
		t.Errorf("the lease held across the failover was lost: %v", h.Cause)
	}
	h.Release()
	if err := <-h.Err; err != nil {
		t.Errorf("holder across the failover: %v", err)
	}
}

// TestPGLeaseAsyncFailoverHazard: with asynchronous replication the last
// grants can be lost in a promotion, and the promoted server issues their
// epochs again (the hazard); AdvanceFences after the promotion moves the
// epochs too, so the next one is above every epoch issued before.
func TestPGLeaseAsyncFailoverHazard(t *testing.T) {
	topology(t)
	r := testdb.StartPGReplication(t, false)
	db := openFront(t, r)
	ctx := context.Background()
	if err := sqllock.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	lease := ormlock.WithLease(2 * time.Second)
	epoch := func() int64 {
		t.Helper()
		e, _, err := epochOf(t, db, "pg-async-lease", lease, ormlock.WithWait(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	for range 3 {
		epoch()
	}
	replicated := epoch()
	r.WaitReplayed(t)

	r.Link.Freeze() // the standby receives nothing from here on
	var lost []int64
	for range 3 {
		lost = append(lost, epoch())
	}
	maxBefore := lost[len(lost)-1]

	r.Primary.StopImmediate(t)
	r.Promote(t)
	r.SwitchFront()
	db.SetMaxIdleConns(0)
	db.SetMaxIdleConns(2)

	again := epoch()
	t.Logf("figure: PostgreSQL asynchronous failover, leases: epochs up to %d replicated, %v granted while the link was frozen, first epoch on the promoted standby %d",
		replicated, lost, again)
	if again > maxBefore {
		t.Fatalf("the promoted standby granted epoch %d, above every epoch before (%d): the hazard did not show (was the link frozen?)", again, maxBefore)
	}
	if again != lost[0] {
		t.Errorf("promoted standby granted epoch %d, want the first one lost in the lag (%d) again", again, lost[0])
	}
	// its count is of fencing counters (none here); the namespace's lease
	// epochs move with them
	if _, err := sqllock.AdvanceFences(ctx, db, 1_000_000); err != nil {
		t.Fatalf("AdvanceFences: %v", err)
	}
	next := epoch()
	t.Logf("figure: PostgreSQL asynchronous, leases: after AdvanceFences(1000000) the next epoch is %d (greatest before the promotion %d)", next, maxBefore)
	if next <= maxBefore {
		t.Errorf("after AdvanceFences the epoch is %d, not above %d", next, maxBefore)
	}
}

// TestPGLeasePromotedClockAhead: the standby's clock runs 30s ahead of
// the primary's (libfaketime); it is promoted under a holder of a 4s
// lease. By the promoted server's clock the lease has expired, so a
// client takes it over at once; the old holder learns at its first
// renewal there, within its deadline (fn's ctx cancelled with cause
// ErrLockLost), and its fenced writes are refused after the new holder's.
func TestPGLeasePromotedClockAhead(t *testing.T) {
	topology(t)
	r := testdb.StartPGReplicationWith(t, testdb.PGReplicationConfig{Sync: true, FakeStandbyClock: true})
	db := openFront(t, r)
	ctx := context.Background()
	if err := sqllock.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	fencedTable(t, db, "pg_clock_fenced")
	const ttl = 4 * time.Second
	lease := ormlock.WithLease(ttl)
	h := hold(t, db, "pg-clock", lease)
	if err := fencedWrite(db, "postgres", "pg_clock_fenced", h.Epoch); err != nil {
		t.Fatalf("the holder's fenced write before the failover: %v", err)
	}
	r.WaitReplayed(t)
	r.Standby.Clock().Set(t, 30*time.Second)

	r.Primary.StopImmediate(t)
	r.Promote(t)
	r.SwitchFront()
	switched := time.Now()
	db.SetMaxIdleConns(0)
	db.SetMaxIdleConns(2)

	taken, grantedAt, err := epochOf(t, db, "pg-clock", lease, ormlock.WithWait(ttl))
	if err != nil {
		t.Fatalf("taking the lease on the promoted server: %v", err)
	}
	if err := fencedWrite(db, "postgres", "pg_clock_fenced", taken); err != nil {
		t.Errorf("the new holder's fenced write: %v", err)
	}
	waitLost(t, h, "holder after the promotion", ttl)
	t.Logf("figure: PostgreSQL standby with its clock %v ahead (measured %v) promoted under a %v lease: taken over %v after the switch (epoch %d, was %d); the holder learned %v after the switch",
		30*time.Second, r.Standby.Skew(t).Round(time.Millisecond), ttl, grantedAt.Sub(switched).Round(time.Millisecond), taken, h.Epoch, h.EndedAt.Sub(switched).Round(time.Millisecond))
	if taken <= h.Epoch {
		t.Errorf("takeover epoch %d, want above %d", taken, h.Epoch)
	}
	if err := fencedWrite(db, "postgres", "pg_clock_fenced", h.Epoch); !errors.Is(err, ormlock.ErrStaleToken) {
		t.Errorf("the old holder's fenced write after the takeover: %v, want ErrStaleToken", err)
	}
}
