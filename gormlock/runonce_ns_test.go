package gormlock_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
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
			testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
				db, _ := openGorm(t, k)
				tbl := ledgerTable(t, k, db)
				billing, _ := openGorm(t, k)
				reports, _ := openGorm(t, k)
				for _, c := range []struct {
					db *gorm.DB
					ns string
				}{{billing, "billing"}, {reports, "reports"}} {
					if err := c.db.Use(gormlock.New(ormlock.WithNamespace(c.ns), ormlock.WithLedgerTable(tbl), ormlock.WithKeepalive(200*time.Millisecond))); err != nil {
						t.Fatal(err)
					}
				}
				const job = "nightly-cleanup"
				slot := slotAt(1)

				// the first service is inside fn when the second one runs
				inside, leave := make(chan struct{}), make(chan struct{})
				var first error
				var wg sync.WaitGroup
				wg.Go(func() {
					first = gormlock.RunOnce(billing, job, slot, func(*gorm.DB) error {
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
				second := gormlock.RunOnce(reports, job, slot, func(*gorm.DB) error { ran = true; return nil }, mode.extra...)
				close(leave)
				wg.Wait()
				if first != nil || second != nil || !ran {
					t.Fatalf("billing: %v; reports: %v (fn ran %v); want both to run", first, second, ran)
				}

				// each namespace now has its slot done, and only its own
				for _, c := range []struct {
					db *gorm.DB
					ns string
				}{{billing, "billing"}, {reports, "reports"}} {
					err := gormlock.RunOnce(c.db, job, slot, func(*gorm.DB) error { return nil }, mode.extra...)
					if !errors.Is(err, ormlock.ErrAlreadyDone) {
						t.Errorf("%s again: %v, want ErrAlreadyDone", c.ns, err)
					}
					rs, err := gormlock.Runs(c.db, job, 10)
					if err != nil || len(rs) != 1 || rs[0].Namespace != c.ns || rs[0].Status != ormlock.RunDone || !rs[0].Slot.Equal(slot) {
						t.Errorf("%s: Runs = %+v, %v; want one done run in its namespace", c.ns, rs, err)
					}
				}
				// no namespace: a third job of its own, not run yet
				if rs := runs(t, db, tbl, job); len(rs) != 0 {
					t.Errorf("Runs without a namespace = %+v, want none", rs)
				}
				if err := gormlock.RunOnce(db, job, slot, func(*gorm.DB) error { return nil }, append(mode.extra, ormlock.WithLedgerTable(tbl))...); err != nil {
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
// an earlier version in place: its rows stay, in the empty namespace, and RunOnce
// and Runs work on it, with and without a namespace.
func TestMigrateUpgradesOldLedger(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := openGorm(t, k)
		name := "o_" + keyhashHex(t.Name())
		oldLedger(t, k, name)
		// before Migrate: RunOnce says what to do
		err := gormlock.RunOnce(db, "old-job", slotAt(0), func(*gorm.DB) error { return nil }, ormlock.WithLedgerTable(name))
		if err == nil || !strings.Contains(err.Error(), "upgrade it with Migrate") {
			t.Fatalf("RunOnce on the old table: %v, want the upgrade hint", err)
		}
		// replicas starting together, with different namespaces
		var wg sync.WaitGroup
		errs := make([]error, 3)
		for i, ns := range []string{"", "billing", "reports"} {
			other, _ := openGorm(t, k)
			wg.Go(func() { errs[i] = gormlock.Migrate(other, ormlock.WithLedgerTable(name), ormlock.WithNamespace(ns)) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("Migrate %d: %v", i, err)
			}
		}
		if err := gormlock.Migrate(db, ormlock.WithLedgerTable(name)); err != nil {
			t.Fatalf("Migrate again: %v", err)
		}

		rs := runs(t, db, name, "old-job")
		if len(rs) != 2 || rs[0].Status != ormlock.RunFailed || rs[0].Error != "boom" || rs[1].Status != ormlock.RunDone ||
			rs[0].Namespace != "" || rs[1].Namespace != "" || rs[1].Owner != "old/1" ||
			!rs[1].Slot.Equal(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)) {
			t.Fatalf("old rows after the upgrade: %+v", rs)
		}
		if rs := runs(t, db, name, "other"); len(rs) != 1 || rs[0].Status != ormlock.RunRunning {
			t.Fatalf("old running row after the upgrade: %+v", rs)
		}
		// without a namespace the old rows are this job's own
		opt := ormlock.WithLedgerTable(name)
		slot0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		if err := gormlock.RunOnce(db, "old-job", slot0, func(*gorm.DB) error { return nil }, opt); !errors.Is(err, ormlock.ErrAlreadyDone) {
			t.Errorf("old done slot: %v, want ErrAlreadyDone", err)
		}
		if err := gormlock.RunOnce(db, "old-job", slot0.Add(time.Hour), func(*gorm.DB) error { return nil }, opt); err != nil {
			t.Errorf("retry of the old failed slot: %v", err)
		}
		// in a namespace, the same (job, slot) is a run of its own, in the
		// upgraded primary key
		ns := ormlock.WithNamespace("billing")
		if err := gormlock.RunOnce(db, "old-job", slot0, func(*gorm.DB) error { return nil }, opt, ns); err != nil {
			t.Errorf("namespaced run of an old slot: %v", err)
		}
		if rs, err := gormlock.Runs(db, "old-job", 10, opt, ns); err != nil || len(rs) != 1 || rs[0].Namespace != "billing" {
			t.Errorf("namespaced Runs: %+v, %v", rs, err)
		}
		if rs := runs(t, db, name, "old-job"); len(rs) != 2 || rs[0].Status != ormlock.RunDone || rs[1].Status != ormlock.RunDone {
			t.Errorf("rows without a namespace: %+v", rs)
		}
	})
}
