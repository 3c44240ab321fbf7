package schedtest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/gormsched"
)

// An Elector WithoutCampaign follows: beside a leader it never leads, and
// the adapter's Holder names the leader; when the leader closes, the key
// stays free (the follower does not campaign), and the follower's Close
// is a no-op.
func TestElectorWithoutCampaign(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		key := "follow:" + jobName(t)
		db := openGorm(t, k)
		leader, err := scheduler.NewElector(gormsched.Backend(db, ormlock.WithOwner("leader")), key)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = leader.Close() })
		follower, err := scheduler.NewElector(gormsched.Backend(openGorm(t, k), ormlock.WithOwner("follower")), key, scheduler.WithoutCampaign())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = follower.Close() })
		if err := leader.IsLeader(context.Background()); err != nil {
			t.Fatalf("leader.IsLeader = %v", err)
		}
		if err := follower.IsLeader(context.Background()); !errors.Is(err, scheduler.ErrNotLeader) {
			t.Fatalf("follower.IsLeader = %v, want ErrNotLeader", err)
		}
		h, err := gormlock.Holder(db, key)
		if err != nil || !h.Held {
			t.Fatalf("Holder = %+v, %v; want held", h, err)
		}
		if err := leader.Close(); err != nil {
			t.Fatal(err)
		}
		// nobody campaigns: the key stays free, the follower does not lead
		for range 5 {
			time.Sleep(50 * time.Millisecond)
			if err := follower.IsLeader(context.Background()); !errors.Is(err, scheduler.ErrNotLeader) {
				t.Fatalf("follower.IsLeader after the leader closed = %v, want ErrNotLeader", err)
			}
		}
		if h, err := gormlock.Holder(db, key); err != nil || h.Held {
			t.Fatalf("Holder after the leader closed = %+v, %v; want free", h, err)
		}
		if err := follower.Close(); err != nil {
			t.Fatalf("follower.Close = %v", err)
		}
	})
}
