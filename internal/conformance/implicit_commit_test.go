package conformance_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// TestMySQLImplicitCommit: MySQL/MariaDB commits the open transaction
// before a DDL statement (TRUNCATE included), behind the library's back. A
// fn that writes, truncates and then fails gets an error that names the
// implicit commit and suggests WithClaim, with fn's error reachable; a
// transactional RunOnce records such a run 'failed' (not a 'running' row
// the next trigger would take over), and one whose fn returned nil 'done'.
func TestMySQLImplicitCommit(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			k := testdb.MariaDB
			ctx := context.Background()
			r := openRunner(t, a, k)
			tbl := ledgerTable(t, k, r)
			scratch := testdb.Table(t, k, "staging")
			if _, err := testdb.AdminDB(t, k).Exec("CREATE TABLE " + scratch + " (id int)"); err != nil {
				t.Fatal(err)
			}
			errFn := errors.New("reload failed")
			job := func(fail bool) func(tx txn) error {
				return func(tx txn) error {
					if err := tx.Insert("implicit-"+a.name, 1); err != nil {
						return err
					}
					if err := tx.Exec("TRUNCATE TABLE " + scratch); err != nil {
						return err
					}
					if fail {
						return errFn
					}
					return nil
				}
			}
			check := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, errFn) {
					t.Errorf("%s: err = %v, want fn's error", what, err)
				}
				if msg := err.Error(); err != nil && (!strings.Contains(msg, "implicit") || !strings.Contains(msg, "WithClaim") || strings.Count(msg, "ormlock: ") != 1) {
					t.Errorf("%s: %q should name the implicit commit, suggest WithClaim and say \"ormlock: \" once", what, msg)
				}
			}
			check("Transaction", r.Transaction(ctx, "implicit-"+a.name, job(true)))
			if err := r.Transaction(ctx, "implicit-"+a.name, job(false)); err != nil {
				t.Errorf("Transaction, fn returned nil: %v", err)
			}

			name := "implicit-job-" + a.name
			check("RunOnce", r.RunOnce(ctx, name, testdb.Slot(0), job(true), ormlock.WithLedgerTable(tbl)))
			if rs := runsOf(t, r, tbl, name); len(rs) != 1 || rs[0].Status != "failed" {
				t.Errorf("RunOnce, fn failed after an implicit commit: ledger %+v, want one 'failed' row", rs)
			}
			if err := r.RunOnce(ctx, name, testdb.Slot(1), job(false), ormlock.WithLedgerTable(tbl)); err != nil {
				t.Errorf("RunOnce, fn returned nil: %v", err)
			}
			if rs := runsOf(t, r, tbl, name); len(rs) != 2 || rs[0].Status != "done" && rs[1].Status != "done" {
				t.Errorf("RunOnce, fn returned nil after an implicit commit: ledger %+v, want a 'done' row", rs)
			}
		})
	}
}
