package chaos_test

import (
	"context"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// TestKillClaimedRun kills -9 a process inside a claim-mode RunOnce
// (cmd/holder -claim) of a slot 30 days old. Its 'running' row outlives it:
// while it lives the row is running and not stale, and Prune keeps it;
// once it is dead the server frees its lock, Runs reports the row stale,
// and Prune with a window shorter than the slot's age deletes it.
func TestKillClaimedRun(t *testing.T) {
	bin := buildHolder(t, t.TempDir())
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := openGorm(t, k)
		admin := testdb.AdminDB(t, k)
		led := ledgerTable(t, db, admin)
		opt := ormlock.WithLedgerTable(led)
		job := "chaos-killed-claim-" + string(k)
		slot := time.Now().Add(-30 * 24 * time.Hour).UTC().Truncate(time.Hour)
		runs := func() []ormlock.Run {
			t.Helper()
			rs, err := gormlock.Runs(db, job, 10, opt)
			if err != nil {
				t.Fatalf("Runs: %v", err)
			}
			return rs
		}
		prune := func() int64 {
			t.Helper()
			n, err := gormlock.Prune(db.WithContext(context.Background()), 24*time.Hour, opt)
			if err != nil {
				t.Fatalf("Prune: %v", err)
			}
			return n
		}

		h := startHolder(t, bin, "-dialect", k.Dialect(), "-dsn", testdb.DSN(t, k), "-verb", "runonce", "-claim",
			"-job", job, "-slot", slot.Format(time.RFC3339Nano), "-ledger", led)
		mustHeld(t, k.Dialect(), admin, lockName{key: ormlock.RunKey(job, slot)})
		if rs := runs(); len(rs) != 1 || rs[0].Status != "running" || rs[0].Stale {
			t.Fatalf("while the holder lives: %+v; want one running row, not stale", rs)
		}
		if n := prune(); n != 0 {
			t.Fatalf("Prune while the holder lives deleted %d rows", n)
		}

		start := time.Now()
		h.killHard(t)
		var rs []ormlock.Run
		for deadline := start.Add(15 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			rs = runs()
			if len(rs) == 1 && rs[0].Stale || time.Now().After(deadline) {
				break
			}
		}
		if len(rs) != 1 || rs[0].Status != "running" || !rs[0].Stale || !rs[0].Finished.IsZero() {
			t.Fatalf("after kill -9: %+v; want one running row, stale", rs)
		}
		t.Logf("stale %v after kill -9", time.Since(start).Round(time.Millisecond))
		if n := prune(); n != 1 {
			t.Fatalf("Prune after the kill deleted %d rows, want the stale one", n)
		}
		if rs := runs(); len(rs) != 0 {
			t.Fatalf("after Prune: %+v", rs)
		}
	})
}
