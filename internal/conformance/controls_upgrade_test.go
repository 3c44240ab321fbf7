package conformance_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/schema"
	"github.com/ormlock/ormlock/internal/testdb"
)

// A ledger of the previous version (its status CHECK without 'skipped'
// and 'rerun', no controls table) works as before, on every adapter and
// server; the actions are refused with the hint to run Migrate, which
// creates the controls table and the actions log and widens the CHECK in
// place (a CHECK it still is); then a pause records its slot 'skipped'
// and a rerun marks one 'rerun'.
func TestMigrateUpgradesLedgerForControls(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r := openRunner(t, a, k)
		ac := r.(actor)
		name := testdb.Table(t, k, "u")
		admin := testdb.AdminDB(t, k)
		f := schema.Families[k.Dialect()]
		q, ix := f.Quote(name), f.Quote(schema.IndexName(name))
		for _, stmt := range []string{strings.Replace(f.Ledger(q, ix), schema.StatusList, "('running', 'done', 'failed')", 1), f.LedgerIndex(q, ix)} {
			if _, err := admin.Exec(stmt); stmt != "" && err != nil {
				t.Fatalf("the previous version's ledger: %v", err)
			}
		}
		opt := ormlock.WithLedgerTable(name)
		job := "upgrade-" + a.name
		fn := func(txn) error { return nil }
		for i, mode := range []ormlock.Option{nil, ormlock.WithClaim()} {
			if err := r.RunOnce(ctx, job, testdb.Slot(i), fn, opt, mode); err != nil {
				t.Fatalf("RunOnce before Migrate: %v", err)
			}
		}
		if _, err := ac.Act(ctx, ormlock.Pause(job).By("op", ""), opt); err == nil || !strings.Contains(err.Error(), "create them with Migrate") {
			t.Errorf("Act before Migrate: %v, want the hint to run Migrate", err)
		}
		for range 2 { // twice: Migrate stays harmless
			if err := r.Migrate(ctx, opt); err != nil {
				t.Fatalf("Migrate: %v", err)
			}
		}
		if _, err := ac.Act(ctx, ormlock.Pause(job).By("op", "upgrade"), opt); err != nil {
			t.Fatalf("pause after Migrate: %v", err)
		}
		if err := r.RunOnce(ctx, job, testdb.Slot(2), fn, opt); !errors.Is(err, ormlock.ErrPaused) {
			t.Errorf("RunOnce of the paused job: %v, want ErrPaused", err)
		}
		if _, err := ac.Act(ctx, ormlock.Rerun(job, testdb.Slot(3)).By("op", ""), opt); err != nil {
			t.Errorf("rerun after Migrate: %v", err)
		}
		for slot, want := range map[int]string{0: "done", 1: "done", 2: "skipped", 3: "rerun"} {
			if row := rowAt(t, r, name, job, testdb.Slot(slot)); row.Status != want {
				t.Errorf("slot %d: %+v, want %s", slot, row, want)
			}
		}
		bogus := "INSERT INTO " + q + " (namespace, job, slot, status, owner, started_at) VALUES ('', 'x', '2030-01-01 00:00:00', 'bogus', '', '2030-01-01 00:00:00')"
		if _, err := admin.Exec(bogus); err == nil {
			t.Errorf("the widened CHECK let a bogus status in")
		}
	})
}
