package conformance_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// TestRunOnceNamespacesSeparateRuns: two services sharing a database and the
// default-shaped ledger table, one with namespace "billing", one with
// "reports", run the same job for the same slot. Each runs its own job: in
// transactional mode neither gets ErrAlreadyDone; in claim mode both run at
// once and neither takes over the other's row (no ErrLockLost). Runs shows
// each service its own row with its namespace.
func TestRunOnceNamespacesSeparateRuns(t *testing.T) {
	for _, mode := range []struct {
		name  string
		extra []ormlock.Option
	}{{"transactional", nil}, {"claim", []ormlock.Option{ormlock.WithClaim()}}} {
		t.Run(mode.name, func(t *testing.T) {
			forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
				ctx := context.Background()
				plain := openRunner(t, a, k)
				tbl := ledgerTable(t, k, plain)
				services := map[string]runner{}
				for _, ns := range []string{"billing", "reports"} {
					services[ns] = a.with(t, k, ormlock.WithNamespace(ns), ormlock.WithLedgerTable(tbl), ormlock.WithKeepalive(200*time.Millisecond))
				}
				const job = "nightly-cleanup"
				slot := testdb.Slot(1)

				// the first service is inside fn when the second one runs
				inside, leave := make(chan struct{}), make(chan struct{})
				var first error
				var wg sync.WaitGroup
				wg.Go(func() {
					first = services["billing"].RunOnce(ctx, job, slot, func(txn) error {
						close(inside)
						<-leave
						return nil
					}, mode.extra...)
				})
				select {
				case <-inside:
				case <-time.After(30 * time.Second):
					t.Fatal("billing's run never started")
				}
				ran := false
				second := services["reports"].RunOnce(ctx, job, slot, func(txn) error { ran = true; return nil }, mode.extra...)
				close(leave)
				wg.Wait()
				if first != nil || second != nil || !ran {
					t.Fatalf("billing: %v; reports: %v (fn ran %v); want both to run", first, second, ran)
				}

				// each namespace now has its slot done, and only its own
				for ns, r := range services {
					err := r.RunOnce(ctx, job, slot, func(txn) error { return nil }, mode.extra...)
					if !errors.Is(err, ormlock.ErrAlreadyDone) {
						t.Errorf("%s again: %v, want ErrAlreadyDone", ns, err)
					}
					rs, err := r.Runs(ctx, job, 10)
					if err != nil || len(rs) != 1 || rs[0].Namespace != ns || rs[0].Status != "done" || !rs[0].Slot.Equal(slot) {
						t.Errorf("%s: Runs = %+v, %v; want one done run in its namespace", ns, rs, err)
					}
				}
				// no namespace: a third job of its own, not run yet
				if rs := runsOf(t, plain, tbl, job); len(rs) != 0 {
					t.Errorf("Runs without a namespace = %+v, want none", rs)
				}
				if err := plain.RunOnce(ctx, job, slot, func(txn) error { return nil }, append(mode.extra, ormlock.WithLedgerTable(tbl))...); err != nil {
					t.Errorf("no namespace: %v", err)
				}
			})
		})
	}
}

// oldLedger creates a ledger table of the shape earlier versions created:
// no namespace column, primary key (job, slot).
func oldLedger(t *testing.T, k testdb.Kind, name string) {
	t.Helper()
	admin := testdb.AdminDB(t, k)
	t.Cleanup(func() { _, _ = admin.Exec("DROP TABLE IF EXISTS " + name) })
	ddl := `CREATE TABLE ` + name + ` (
	job         varchar(191) NOT NULL,
	slot        timestamptz  NOT NULL,
	status      varchar(16)  NOT NULL CHECK (status IN ('running', 'done', 'failed')),
	owner       varchar(255) NOT NULL DEFAULT '',
	started_at  timestamptz  NOT NULL,
	finished_at timestamptz,
	error       text,
	PRIMARY KEY (job, slot)
)`
	ins := `INSERT INTO ` + name + ` (job, slot, status, owner, started_at, finished_at, error) VALUES
('old-job', '2030-01-01 00:00:00+00', 'done', 'old/1', '2030-01-01 00:00:01+00', '2030-01-01 00:00:02+00', NULL),
('old-job', '2030-01-01 01:00:00+00', 'failed', 'old/1', '2030-01-01 01:00:01+00', '2030-01-01 01:00:02+00', 'boom'),
('other', '2030-01-01 00:00:00+00', 'running', 'old/2', '2030-01-01 00:00:01+00', NULL, NULL)`
	if k.Dialect() == "mysql" {
		ddl = "CREATE TABLE " + name + ` (
	job         VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
	slot        DATETIME(6)  NOT NULL,
	status      VARCHAR(16)  NOT NULL,
	owner       VARCHAR(255) CHARACTER SET utf8mb4 NOT NULL DEFAULT '',
	started_at  DATETIME(6)  NOT NULL,
	finished_at DATETIME(6)  NULL,
	error       TEXT         CHARACTER SET utf8mb4 NULL,
	PRIMARY KEY (job, slot),
	CHECK (status IN ('running', 'done', 'failed'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`
		ins = "INSERT INTO " + name + ` (job, slot, status, owner, started_at, finished_at, error) VALUES
('old-job', '2030-01-01 00:00:00', 'done', 'old/1', '2030-01-01 00:00:01', '2030-01-01 00:00:02', NULL),
('old-job', '2030-01-01 01:00:00', 'failed', 'old/1', '2030-01-01 01:00:01', '2030-01-01 01:00:02', 'boom'),
('other', '2030-01-01 00:00:00', 'running', 'old/2', '2030-01-01 00:00:01', NULL, NULL)`
	}
	if _, err := admin.Exec(ddl); err != nil {
		t.Fatalf("create the old ledger: %v", err)
	}
	if _, err := admin.Exec(ins); err != nil {
		t.Fatalf("fill the old ledger: %v", err)
	}
}

// TestMigrateUpgradesOldLedger: Migrate upgrades a ledger table created by
// an earlier version in place: its rows stay, in the empty namespace, it
// gets the index on (namespace, slot), and RunOnce and Runs work on it, with and without a namespace.
func TestMigrateUpgradesOldLedger(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r := openRunner(t, a, k)
		name := testdb.TableName(t, "o")
		oldLedger(t, k, name)
		// before Migrate: RunOnce says what to do
		err := r.RunOnce(ctx, "old-job", testdb.Slot(0), func(txn) error { return nil }, ormlock.WithLedgerTable(name))
		if err == nil || !strings.Contains(err.Error(), "upgrade it with Migrate") {
			t.Fatalf("RunOnce on the old table: %v, want the upgrade hint", err)
		}
		// replicas starting together, with different namespaces
		var wg sync.WaitGroup
		errs := make([]error, 3)
		for i, ns := range []string{"", "billing", "reports"} {
			other := openRunner(t, a, k)
			wg.Go(func() { errs[i] = other.Migrate(ctx, ormlock.WithLedgerTable(name), ormlock.WithNamespace(ns)) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("Migrate %d: %v", i, err)
			}
		}
		if err := r.Migrate(ctx, ormlock.WithLedgerTable(name)); err != nil {
			t.Fatalf("Migrate again: %v", err)
		}
		wantPruneIndex(t, k, name)

		rs := runsOf(t, r, name, "old-job")
		if len(rs) != 2 || rs[0].Status != "failed" || rs[0].Error != "boom" || rs[1].Status != "done" ||
			rs[0].Namespace != "" || rs[1].Namespace != "" || rs[1].Owner != "old/1" ||
			!rs[1].Slot.Equal(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)) {
			t.Fatalf("old rows after the upgrade: %+v", rs)
		}
		if rs := runsOf(t, r, name, "other"); len(rs) != 1 || rs[0].Status != "running" {
			t.Fatalf("old running row after the upgrade: %+v", rs)
		}
		// without a namespace the old rows are this job's own
		opt := ormlock.WithLedgerTable(name)
		slot0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		if err := r.RunOnce(ctx, "old-job", slot0, func(txn) error { return nil }, opt); !errors.Is(err, ormlock.ErrAlreadyDone) {
			t.Errorf("old done slot: %v, want ErrAlreadyDone", err)
		}
		if err := r.RunOnce(ctx, "old-job", slot0.Add(time.Hour), func(txn) error { return nil }, opt); err != nil {
			t.Errorf("retry of the old failed slot: %v", err)
		}
		// in a namespace, the same (job, slot) is a run of its own, in the
		// upgraded primary key
		ns := ormlock.WithNamespace("billing")
		if err := r.RunOnce(ctx, "old-job", slot0, func(txn) error { return nil }, opt, ns); err != nil {
			t.Errorf("namespaced run of an old slot: %v", err)
		}
		if rs, err := r.Runs(ctx, "old-job", 10, opt, ns); err != nil || len(rs) != 1 || rs[0].Namespace != "billing" {
			t.Errorf("namespaced Runs: %+v, %v", rs, err)
		}
		if rs := runsOf(t, r, name, "old-job"); len(rs) != 2 || rs[0].Status != "done" || rs[1].Status != "done" {
			t.Errorf("rows without a namespace: %+v", rs)
		}
	})
}
