package entlock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/enttest/ent"
	"github.com/ormlock/ormlock/internal/testdb"
)

// TestRunOnceNamespacesSeparateRuns: two services, namespaces "billing" and
// "reports", one ledger table, the same job and slot: each runs its own job
// (transactional and claim mode, the second while the first is inside fn),
// and Runs shows each its own row.
func TestRunOnceNamespacesSeparateRuns(t *testing.T) {
	for _, mode := range []struct {
		name  string
		extra []ormlock.Option
	}{{"transactional", nil}, {"claim", []ormlock.Option{ormlock.WithClaim()}}} {
		t.Run(mode.name, func(t *testing.T) {
			testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
				ctx := context.Background()
				plain, _ := openEnt(t, k)
				tbl := ledgerTable(t, k, plain)
				billing, _ := openEnt(t, k, ormlock.WithNamespace("billing"), ormlock.WithLedgerTable(tbl))
				reports, _ := openEnt(t, k, ormlock.WithNamespace("reports"), ormlock.WithLedgerTable(tbl))
				const job = "nightly-cleanup"
				slot := slotAt(2)
				var second error
				ran := false
				first := entlock.RunOnce(ctx, billing, job, slot, func(*ent.Tx) error {
					second = entlock.RunOnce(ctx, reports, job, slot, func(*ent.Tx) error { ran = true; return nil }, mode.extra...)
					return nil
				}, mode.extra...)
				if first != nil || second != nil || !ran {
					t.Fatalf("billing: %v; reports: %v (fn ran %v); want both to run", first, second, ran)
				}
				for ns, c := range map[string]*ent.Client{"billing": billing, "reports": reports} {
					if err := entlock.RunOnce(ctx, c, job, slot, func(*ent.Tx) error { return nil }, mode.extra...); !errors.Is(err, ormlock.ErrAlreadyDone) {
						t.Errorf("%s again: %v, want ErrAlreadyDone", ns, err)
					}
					rs, err := entlock.Runs(ctx, c, job, 10)
					if err != nil || len(rs) != 1 || rs[0].Namespace != ns || rs[0].Status != ormlock.RunDone {
						t.Errorf("%s: Runs = %+v, %v", ns, rs, err)
					}
				}
				if rs := runs(t, plain, tbl, job); len(rs) != 0 {
					t.Errorf("Runs without a namespace = %+v, want none", rs)
				}
			})
		})
	}
}
