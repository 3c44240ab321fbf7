package conformance_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

// RunOnce in claim mode with WithLease: the run's lock is the lease of
// RunKey(job, slot), held while fn runs on no connection and no advisory or
// named lock, and expired after; Runs shows the running claim with its
// mechanism, a second claim of the slot is not acquired, and the slot is
// done once fn returned.
func TestRunOnceClaimLease(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r := openRunner(t, a, k)
		opts := append(leaseOpts(t, k, r, 2*time.Second), ormlock.WithClaim())
		plain := opts[:2:2] // the tables only
		job, slot := "claim-lease-"+t.Name(), testdb.Slot(1)
		key := ormlock.RunKey(job, slot)
		ran := false
		err := r.RunOnce(ctx, job, slot, func(tx txn) error {
			ran = true
			if tok, ok := tx.FencingToken(); !ok || tok <= 0 {
				t.Errorf("fn's fencing token %d, %v; want the lease's epoch", tok, ok)
			}
			// no server lock: Holder without WithLease finds the lease
			h := holderOf(t, r, key, plain...)
			if !h.Held || h.Mechanism != "lease" || h.Epoch <= 0 || h.PID != 0 {
				t.Errorf("Holder of the run's key while it runs: %+v", h)
			}
			if tok, _ := tx.FencingToken(); tok != h.Epoch {
				t.Errorf("fn's token %d, the lease's epoch %d", tok, h.Epoch)
			}
			runs, err := r.Runs(ctx, job, 5, plain...)
			if err != nil || len(runs) != 1 || runs[0].Status != "running" || runs[0].Stale || runs[0].Mechanism != "lease" {
				t.Errorf("Runs while the run holds its lease: %+v, %v", runs, err)
			}
			err = r.RunOnce(ctx, job, slot, func(txn) error { t.Error("a second claim ran"); return nil }, opts...)
			if !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Errorf("a second claim of the slot: %v, want ErrNotAcquired", err)
			}
			return nil
		}, opts...)
		if err != nil || !ran {
			t.Fatalf("RunOnce: %v (ran %v)", err, ran)
		}
		if h := holderOf(t, r, key, opts...); h.Held {
			t.Errorf("the lease after the run: %+v", h)
		}
		runs, err := r.Runs(ctx, job, 5, plain...)
		if err != nil || len(runs) != 1 || runs[0].Status != "done" || runs[0].Mechanism != "" {
			t.Errorf("Runs after the run: %+v, %v", runs, err)
		}
		err = r.RunOnce(ctx, job, slot, func(txn) error { t.Error("ran a done slot"); return nil }, opts...)
		if !errors.Is(err, ormlock.ErrAlreadyDone) {
			t.Errorf("RunOnce of a done slot: %v, want ErrAlreadyDone", err)
		}
		if n := liveLeases(t, k, leaseTableOf(t, k)); n != 0 {
			t.Errorf("%d live leases after the runs", n)
		}
		testdb.AssertNoLeaks(t, k, r.Pool())
	})
}

// A claim whose lease is no longer renewed (its holder stopped: the renew
// hook skips it) is lost within the lease's TTL: fn's context ends with
// cause ErrLockLost, RunOnce returns it and the claim is marked failed, so
// the slot may run again. A 'running' row whose lease has expired (its
// owner died before recording the end) is stale in Runs; one whose lease
// is live is not.
func TestRunOnceClaimLeaseLost(t *testing.T) {
	// one hook for the kinds, which run in parallel: each adds its key
	var stopped sync.Map
	lockproto.SetLeaseRenewHook(func(_, key string) bool { _, skip := stopped.Load(key); return !skip })
	t.Cleanup(func() { lockproto.SetLeaseRenewHook(nil) })
	forEachAdapterOn(t, "sqllock", func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r := openRunner(t, a, k)
		opts := append(leaseOpts(t, k, r, time.Second), ormlock.WithClaim())
		plain := opts[:2:2]
		job, slot := "claim-lease-lost-"+t.Name(), testdb.Slot(2)
		id := lockproto.FenceID(ormlock.RunKey(job, slot))
		stopped.Store(id, true)
		err := r.RunOnce(ctx, job, slot, func(tx txn) error {
			select {
			case <-tx.Context().Done():
				return tx.Context().Err()
			case <-time.After(30 * time.Second):
				t.Error("fn's context never ended")
				return nil
			}
		}, opts...)
		if !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("RunOnce whose lease is not renewed: %v, want ErrLockLost", err)
		}
		stopped.Delete(id)
		runs, err := r.Runs(ctx, job, 5, plain...)
		if err != nil || len(runs) != 1 || runs[0].Status != "failed" {
			t.Fatalf("Runs after the loss: %+v, %v", runs, err)
		}

		// a 'running' row of a dead owner under a lease: stale once the
		// lease has expired, not while it lives
		dead := testdb.Slot(3)
		err = r.RunOnce(ctx, job, dead, func(tx txn) error {
			// the row as a dead owner leaves it: written by hand, the
			// lease left to expire (its owner stopped renewing)
			return nil
		}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		admin := testdb.AdminDB(t, k)
		if _, err := admin.Exec("UPDATE "+testdb.TableName(t, "c")+" SET status = 'running', finished_at = NULL WHERE job = "+placeholder(k)+" AND status = 'done'", job); err != nil {
			t.Fatal(err)
		}
		write, expire := leaseRowSQL(k, leaseTableOf(t, k))
		var arg any = lockproto.FenceID(ormlock.RunKey(job, dead))
		if k.Dialect() == "mysql" {
			arg = []byte(arg.(string))
		}
		if _, err := admin.Exec("DELETE FROM "+leaseTableOf(t, k)+" WHERE lock_key = "+placeholder(k), arg); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Exec(write, arg); err != nil {
			t.Fatal(err)
		}
		runs, err = r.Runs(ctx, job, 5, plain...)
		if err != nil || len(runs) != 2 || runs[0].Status != "running" || runs[0].Stale || runs[0].Mechanism != "lease" {
			t.Errorf("Runs with a live lease: %+v, %v", runs, err)
		}
		if _, err := admin.Exec(expire, arg); err != nil {
			t.Fatal(err)
		}
		runs, err = r.Runs(ctx, job, 5, plain...)
		if err != nil || len(runs) != 2 || runs[0].Status != "running" || !runs[0].Stale || runs[0].Mechanism != "" {
			t.Errorf("Runs with the lease expired: %+v, %v", runs, err)
		}
		testdb.AssertNoLeaks(t, k, r.Pool())
	})
}

// placeholder is the first argument's placeholder on k's server.
func placeholder(k testdb.Kind) string {
	if k.Dialect() == "mysql" {
		return "?"
	}
	return "$1"
}

// forEachAdapterOn runs f for the adapter named name on every kind, as
// forEach does for all of them.
func forEachAdapterOn(t *testing.T, name string, f func(t *testing.T, a adapter, k testdb.Kind)) {
	t.Helper()
	for _, a := range adapters {
		if a.name == name {
			forKindsOf(t, []adapter{a}, func(a adapter) string { return a.name }, testdb.Kinds(), f)
			return
		}
	}
	t.Fatalf("no adapter %q", name)
}
