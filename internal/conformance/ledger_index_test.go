package conformance_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

// pruneIndexes returns the names of the indexes of table whose columns are
// exactly (namespace, slot), read from the server's catalog.
func pruneIndexes(t *testing.T, k testdb.Kind, table string) []string {
	t.Helper()
	q := `SELECT ic.relname FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
WHERE i.indrelid = to_regclass($1) AND i.indisvalid AND i.indnatts = 2
AND i.indkey[0] = (SELECT attnum FROM pg_attribute WHERE attrelid = i.indrelid AND attname = 'namespace')
AND i.indkey[1] = (SELECT attnum FROM pg_attribute WHERE attrelid = i.indrelid AND attname = 'slot')
ORDER BY 1`
	if k.Dialect() == "mysql" {
		q = `SELECT INDEX_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?
GROUP BY INDEX_NAME
HAVING GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX) = 'namespace,slot' ORDER BY 1`
	} else {
		table = `"` + table + `"`
	}
	rows, err := testdb.AdminDB(t, k).Query(q, table)
	if err != nil {
		t.Fatalf("read the indexes of %s: %v", table, err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		names = append(names, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// wantPruneIndex fails the test unless table has exactly one index on
// (namespace, slot), named as the ledger names it.
func wantPruneIndex(t *testing.T, k testdb.Kind, table string) {
	t.Helper()
	tbl := ledgerOf(t, k, table)
	got := pruneIndexes(t, k, table)
	if len(got) != 1 || got[0] != tbl.IndexName() {
		t.Fatalf("indexes of %s on (namespace, slot): %q, want [%q]", table, got, tbl.IndexName())
	}
	if len(got[0]) > 63 {
		t.Fatalf("index name %q is %d bytes", got[0], len(got[0]))
	}
}

// ledgerOf is the ledger's Table of name on k's dialect.
func ledgerOf(t *testing.T, k testdb.Kind, name string) *ledger.Table {
	t.Helper()
	d := lockproto.Postgres
	if k.Dialect() == "mysql" {
		d = lockproto.MySQL
	}
	tbl, err := ledger.NewTable(d, name)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// previousLedger creates a ledger table of the shape the release before
// the prune index created (namespace column, primary key (namespace, job,
// slot), no other index: today's CREATE TABLE without the index), with a
// few old finished rows and a running one.
func previousLedger(t *testing.T, k testdb.Kind, name string) {
	t.Helper()
	admin := testdb.AdminDB(t, k)
	tbl := ledgerOf(t, k, name)
	ddl := strings.Replace(tbl.CreateSQL(), "\n\tKEY `"+tbl.IndexName()+"` (namespace, slot),", "", 1)
	if strings.Contains(ddl, "(namespace, slot)") {
		t.Fatalf("the index is still in the previous shape's DDL: %s", ddl)
	}
	if _, err := admin.Exec(ddl); err != nil {
		t.Fatalf("create the previous ledger: %v", err)
	}
	ins := `INSERT INTO "` + name + `" (namespace, job, slot, status, owner, started_at, finished_at) VALUES
('', 'old-job', '2020-01-01 00:00:00+00', 'done', 'old/1', '2020-01-01 00:00:01+00', '2020-01-01 00:00:02+00'),
('', 'old-job', '2020-01-01 01:00:00+00', 'failed', 'old/1', '2020-01-01 01:00:01+00', '2020-01-01 01:00:02+00'),
('', 'other', '2020-01-01 00:00:00+00', 'running', 'old/2', '2020-01-01 00:00:01+00', NULL),
('billing', 'old-job', '2020-01-01 00:00:00+00', 'done', 'old/1', '2020-01-01 00:00:01+00', '2020-01-01 00:00:02+00')`
	if k.Dialect() == "mysql" {
		ins = strings.NewReplacer(`"`, "`", "+00'", "'").Replace(ins)
	}
	if _, err := admin.Exec(ins); err != nil {
		t.Fatalf("fill the previous ledger: %v", err)
	}
}

// TestMigrateAddsPruneIndex: Migrate adds the index on (namespace, slot) to
// a ledger table created before it existed, once however many replicas
// migrate together and however often; the rows stay, and Prune then deletes
// the old finished ones of its namespace only.
func TestMigrateAddsPruneIndex(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		name := testdb.Table(t, k, "pi")
		previousLedger(t, k, name)
		if got := pruneIndexes(t, k, name); len(got) != 0 {
			t.Fatalf("the previous shape has indexes on (namespace, slot): %q", got)
		}
		off := testdb.LogOffset(t, k)
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make([]error, 3)
		for i := range errs {
			r := openRunner(t, a, k)
			wg.Go(func() {
				<-start
				errs[i] = r.Migrate(ctx, ormlock.WithLedgerTable(name))
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("concurrent Migrate %d: %v", i, err)
			}
		}
		r := openRunner(t, a, k)
		if err := r.Migrate(ctx, ormlock.WithLedgerTable(name)); err != nil {
			t.Fatalf("Migrate again: %v", err)
		}
		testdb.AssertNoDuplicateKeyLogged(t, k, off)
		wantPruneIndex(t, k, name)
		if !free(t, k, "ormlock.migrate:"+name) {
			t.Fatal("Migrate's lock still held")
		}

		opt := ormlock.WithLedgerTable(name)
		if rs := runsOf(t, r, name, "old-job"); len(rs) != 2 {
			t.Fatalf("rows after Migrate: %+v", rs)
		}
		if n, err := r.Prune(ctx, 24*time.Hour, opt); err != nil || n != 2 {
			t.Fatalf("Prune: %d, %v; want 2 (the done and the failed row of the empty namespace)", n, err)
		}
		if rs := runsOf(t, r, name, "other"); len(rs) != 1 || rs[0].Status != "running" {
			t.Fatalf("the running row after Prune: %+v", rs)
		}
		if rs, err := r.Runs(ctx, "old-job", 10, opt, ormlock.WithNamespace("billing")); err != nil || len(rs) != 1 {
			t.Fatalf("the other namespace's row after Prune: %+v, %v", rs, err)
		}
	})
}

// TestMigrateCreatesPruneIndex: Migrate of a new table creates the index on
// (namespace, slot) with it, also under a 63-byte table name (the longest
// the ledger accepts), whose index gets a shortened name of at most 63
// bytes, not one the server truncates or refuses; RunOnce and Prune work on
// it.
func TestMigrateCreatesPruneIndex(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r := openRunner(t, a, k)
		for _, prefix := range []string{"ci", strings.Repeat("long_ledger_", 4)[:46]} {
			name := testdb.Table(t, k, prefix)
			if err := r.Migrate(ctx, ormlock.WithLedgerTable(name)); err != nil {
				t.Fatalf("Migrate(%s): %v", name, err)
			}
			wantPruneIndex(t, k, name)
			opt := ormlock.WithLedgerTable(name)
			if err := r.RunOnce(ctx, "job", testdb.Slot(0), func(txn) error { return nil }, opt); err != nil {
				t.Fatalf("RunOnce on %s: %v", name, err)
			}
			if _, err := r.Prune(ctx, time.Hour, opt); err != nil {
				t.Fatalf("Prune on %s: %v", name, err)
			}
		}
	})
}
