package conformance_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/sqllock"
)

// leaseRowSQL writes the live lease row a holder's acquire leaves for a
// key ($1: its lock_key), granted 2 s ago and expiring in 20 s by the
// server's clock, with epoch 7 and owner replica-a; expireSQL expires it.
func leaseRowSQL(k testdb.Kind, table string) (write, expire string) {
	if k.Dialect() == "mysql" {
		return "INSERT INTO " + table + ` (namespace, lock_key, reader, epoch, mode, owner, holder, acquired_at, expires_at)
VALUES ('', ?, '', 7, 'exclusive', 'replica-a', 'h1', UTC_TIMESTAMP(6) - INTERVAL 2 SECOND, UTC_TIMESTAMP(6) + INTERVAL 20 SECOND)`,
			"UPDATE " + table + " SET expires_at = UTC_TIMESTAMP(6) WHERE lock_key = ?"
	}
	return "INSERT INTO " + table + ` (namespace, lock_key, reader, epoch, mode, owner, holder, acquired_at, expires_at)
VALUES ('', $1, '', 7, 'exclusive', 'replica-a', 'h1', clock_timestamp() - interval '2 seconds', clock_timestamp() + interval '20 seconds')`,
		"UPDATE " + table + " SET expires_at = clock_timestamp() WHERE lock_key = $1"
}

// TestHolderLease: a key's live lease row is what Holder reports when the
// key's advisory or named lock is free (a lease and a lock of one key are
// different locks), and Holders lists both while both are held; the
// lease's epoch, owner, mode and time left come from its row, by the
// server's clock. An expired lease is free, and so is every lease while
// the lease table does not exist.
func TestHolderLease(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r := openRunner(t, a, k)
		ledger := testdb.Table(t, k, "lholder")
		table := ledger + "_l"
		t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + table) })
		opts := []ormlock.Option{ormlock.WithLedgerTable(ledger), ormlock.WithLeaseTable(table)}
		key := "holder-lease-" + t.Name()

		if h := holderOf(t, r, key, opts...); h.Held { // no lease table yet
			t.Fatalf("Holder without a lease table: %+v", h)
		}
		if err := r.Migrate(ctx, opts...); err != nil {
			t.Fatal(err)
		}
		write, expire := leaseRowSQL(k, table)
		var arg any = "name:" + key
		if k.Dialect() == "mysql" {
			arg = []byte("name:" + key)
		}
		if _, err := testdb.AdminDB(t, k).Exec(write, arg); err != nil {
			t.Fatal(err)
		}

		for _, o := range [][]ormlock.Option{opts, append(opts[:2:2], ormlock.WithLease(20*time.Second))} {
			h := holderOf(t, r, key, o...)
			if !h.Held || h.Mechanism != "lease" || h.Epoch != 7 || h.Owner != "replica-a" || h.Mode != "exclusive" || h.Shared || h.PID != 0 ||
				h.ExpiresIn <= 15*time.Second || h.ExpiresIn > 20*time.Second || h.HeldFor < 2*time.Second || h.HeldFor > 10*time.Second {
				t.Errorf("Holder of a leased key: %+v", h)
			}
			if !strings.HasPrefix(h.String(), "held lease epoch=7 ") || !strings.Contains(h.Lock, table) {
				t.Errorf("Holder: %s (lock %s)", h, h.Lock)
			}
		}

		// the advisory or named lock held too: Holder names it, Holders both
		db := testdb.Open(t, k)
		err := r.Transaction(ctx, key, func(txn) error {
			h, err := r.Holder(ctx, key, opts...)
			if err != nil || !h.Held || h.Mechanism == "lease" || h.PID == 0 {
				t.Errorf("Holder while the lock is held too: %+v, %v", h, err)
			}
			hs, err := sqllock.Holders(ctx, db, key, opts...)
			if err != nil || len(hs) != 2 || hs[0].Mechanism == "lease" || hs[1].Mechanism != "lease" || hs[1].Epoch != 7 {
				t.Errorf("Holders while both are held: %+v, %v", hs, err)
			}
			return nil
		}, opts...)
		if err != nil {
			t.Fatal(err)
		}

		if _, err := testdb.AdminDB(t, k).Exec(expire, arg); err != nil {
			t.Fatal(err)
		}
		if h := holderOf(t, r, key, opts...); h.Held {
			t.Errorf("Holder of an expired lease: %+v", h)
		}
		testdb.AssertNoLeaks(t, k, db)
	})
}

// Holders of leased shapes: each reader of a shared key is a row of its own
// (Shared, Mode "shared"), a semaphore's held slot names its slot; all of
// them leases, with their epochs, and no connection.
func TestHoldersLeaseShapes(t *testing.T) {
	forEachAdapterOn(t, "sqllock", func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r := openRunner(t, a, k)
		opts := leaseOpts(t, k, r, 5*time.Second)
		name := "holders-lease-" + t.Name()
		shared := ormlock.Shared(ormlock.Name(name))
		sem := ormlock.Semaphore(ormlock.Name(name+"-sem"), 3)
		release := make(chan struct{})
		held := make(chan error, 3)
		done := make(chan error, 3)
		for _, key := range []ormlock.Key{shared, shared, sem} {
			go func() {
				done <- r.Session(ctx, key, func(context.Context) error {
					held <- nil
					<-release
					return nil
				}, opts...)
			}()
		}
		for range 3 {
			select {
			case err := <-done:
				close(release)
				t.Fatalf("a Session ended before holding: %v", err)
			case <-held:
			}
		}
		hs, err := sqllock.Holders(ctx, r.Pool(), shared, opts...)
		if err != nil || len(hs) != 2 {
			t.Errorf("Holders of a key two readers lease: %+v, %v", hs, err)
		}
		for _, h := range hs {
			if !h.Held || h.Mechanism != "lease" || !h.Shared || h.Mode != "shared" || h.Epoch <= 0 || h.PID != 0 || !strings.Contains(h.Lock, " reader=") {
				t.Errorf("a reader's lease: %+v", h)
			}
		}
		hs, err = sqllock.Holders(ctx, r.Pool(), sem, opts...)
		if err != nil || len(hs) != 1 || hs[0].Mechanism != "lease" || hs[0].Slot < 1 || hs[0].Slot > 3 || hs[0].Shared || hs[0].Epoch <= 0 {
			t.Errorf("Holders of a semaphore one lease holds: %+v, %v", hs, err)
		}
		close(release)
		for range 3 {
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
		if hs, err := sqllock.Holders(ctx, r.Pool(), shared, opts...); err != nil || len(hs) != 0 {
			t.Errorf("Holders after the release: %+v, %v", hs, err)
		}
		testdb.AssertNoLeaks(t, k, r.Pool())
	})
}
