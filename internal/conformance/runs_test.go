package conformance_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/testdb"
)

// Runs lists a job's runs, newest slot first, with their outcome, owner,
// error and server-side times in UTC, whatever order they ran in.
func TestConformanceRuns(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r := openRunner(t, a, k)
		tbl := ledgerTable(t, k, r)
		job := "audit-" + t.Name()
		opt := ormlock.WithLedgerTable(tbl)
		berlin, err := time.LoadLocation("Europe/Berlin")
		if err != nil {
			t.Skip(err)
		}
		// slots given in Berlin time: stored as the UTC instant; run out of
		// order (a fraction of a second is refused: ValidateSlot)
		slot := func(day int) time.Time { return time.Date(2031, 3, day, 0, 0, 0, 0, berlin) }
		if err := r.RunOnce(ctx, job, slot(3), func(txn) error { time.Sleep(20 * time.Millisecond); return nil }, opt, ormlock.WithClaim(), ormlock.WithOwner("c")); err != nil {
			t.Fatal(err)
		}
		if err := r.RunOnce(ctx, job, slot(1), func(txn) error { return nil }, opt, ormlock.WithOwner("a")); err != nil {
			t.Fatal(err)
		}
		if err := r.RunOnce(ctx, job, slot(2), func(txn) error { return errors.New("disk full") }, opt, ormlock.WithClaim(), ormlock.WithOwner("b")); err == nil {
			t.Fatal("want fn's error")
		}
		// another job's run is not listed
		if err := r.RunOnce(ctx, job+"-other", slot(4), func(txn) error { return nil }, opt); err != nil {
			t.Fatal(err)
		}
		rs, err := r.Runs(ctx, job, 10, opt)
		if err != nil {
			t.Fatal(err)
		}
		want := []struct {
			day    int
			status string
			owner  string
			err    string
		}{{3, "done", "c", ""}, {2, "failed", "b", "disk full"}, {1, "done", "a", ""}}
		if len(rs) != len(want) {
			t.Fatalf("Runs = %+v, want %d rows", rs, len(want))
		}
		for i, w := range want {
			r := rs[i]
			ws := keys.NormalizeSlot(slot(w.day))
			if r.Job != job || !r.Slot.Equal(ws) || r.Slot.Location() != time.UTC || r.Status != w.status || r.Owner != w.owner || r.Error != w.err {
				t.Errorf("run %d = %+v, want slot %v %s by %s error %q", i, r, ws, w.status, w.owner, w.err)
			}
			if r.Started.IsZero() || r.Finished.Before(r.Started) || r.Duration != r.Finished.Sub(r.Started) || r.Started.Location() != time.UTC {
				t.Errorf("run %d times: started %v finished %v duration %v", i, r.Started, r.Finished, r.Duration)
			}
		}
		if rs[0].Duration < 10*time.Millisecond {
			t.Errorf("claim run that slept 20ms lasted %v by the ledger", rs[0].Duration)
		}
		if d := time.Since(rs[0].Started); d < -time.Minute || d > time.Hour {
			t.Errorf("started %v is not close to now (server clock in UTC?)", rs[0].Started)
		}
		t.Logf("durations: %v %v %v", rs[0].Duration, rs[1].Duration, rs[2].Duration)
		if rs, err := r.Runs(ctx, job, 2, opt); err != nil || len(rs) != 2 || !rs[1].Slot.Equal(keys.NormalizeSlot(slot(2))) {
			t.Fatalf("Runs limit 2 = %+v, %v", rs, err)
		}
		if rs, err := r.Runs(ctx, "never-ran", 5, opt); err != nil || len(rs) != 0 {
			t.Fatalf("Runs of an unknown job = %+v, %v", rs, err)
		}
		if _, err := r.Runs(ctx, job, 0, opt); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Errorf("limit 0: %v", err)
		}
		if _, err := r.Runs(ctx, "", 5, opt); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Errorf("empty job: %v", err)
		}
	})
}

// Replicas starting together: concurrent and repeated Migrate calls all
// succeed, provoke no duplicate-key error in the server log, create the
// table and its one index on (namespace, slot), and leave Migrate's own lock free.
func TestConformanceMigrateConcurrent(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		name := testdb.Table(t, k, "m")
		off := testdb.LogOffset(t, k)
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			other := openRunner(t, a, k)
			wg.Go(func() { errs[i] = other.Migrate(ctx, ormlock.WithLedgerTable(name)) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("concurrent Migrate %d: %v", i, err)
			}
		}
		if err := openRunner(t, a, k).Migrate(ctx, ormlock.WithLedgerTable(name)); err != nil {
			t.Fatalf("Migrate again: %v", err)
		}
		testdb.AssertNoDuplicateKeyLogged(t, k, off)
		var n int
		q := "SELECT count(*) FROM information_schema.tables WHERE table_name = $1"
		if k.Dialect() == "mysql" {
			q = "SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?"
		}
		if err := testdb.AdminDB(t, k).QueryRow(q, name).Scan(&n); err != nil || n == 0 {
			t.Fatalf("table %s not created (%d, %v)", name, n, err)
		}
		wantPruneIndex(t, k, name)
		if !free(t, k, "ormlock.migrate:"+name) {
			t.Fatal("Migrate's lock still held")
		}
	})
}
