package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	_ "time/tzdata"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

// A bad ledger table name is refused before anything is sent, by Migrate,
// RunOnce (either mode) and Runs; a missing table is reported with a hint.
// A bad name as the adapter's default (GORM's plugin, entlock.Wrap) is
// each adapter's own test.
func TestLedgerBadTableNames(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		// a pool that is already closed: any statement would fail with
		// "sql: database is closed", so ErrInvalidArgument proves that
		// nothing was sent
		closed := testdb.Open(t, k)
		closed.Close()
		r := a.on(t, k.Dialect(), closed)
		fn := func(txn) error { return errors.New("fn called") }
		for _, name := range []string{"runs; DROP TABLE x", "", strings.Repeat("a", 64), "1runs", "a-b", `r"s`, "r`s", "schema.runs", "ré"} {
			opt := ormlock.WithLedgerTable(name)
			if err := r.Migrate(ctx, opt); !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "table name") {
				t.Errorf("Migrate(%q): %v, want ErrInvalidArgument naming the table", name, err)
			}
			for _, mode := range []ormlock.Option{nil, ormlock.WithClaim()} {
				if err := r.RunOnce(ctx, "j", testdb.Slot(0), fn, opt, mode); !errors.Is(err, ormlock.ErrInvalidArgument) {
					t.Errorf("RunOnce with table %q: %v", name, err)
				}
			}
			if _, err := r.Runs(ctx, "j", 1, opt); !errors.Is(err, ormlock.ErrInvalidArgument) {
				t.Errorf("Runs with table %q: %v", name, err)
			}
		}
		if err := config.ValidIdentifier("t", strings.Repeat("a", 63)); err != nil {
			t.Errorf("63-byte name rejected: %v", err)
		}
		// a missing table is reported with a hint
		live := openRunner(t, a, k)
		for _, mode := range []ormlock.Option{nil, ormlock.WithClaim()} {
			err := live.RunOnce(ctx, "j-"+t.Name(), testdb.Slot(0), fn, ormlock.WithLedgerTable("no_such_ledger"), mode)
			if err == nil || !strings.Contains(err.Error(), "create it with Migrate") {
				t.Errorf("missing table: %v", err)
			}
		}
		if _, err := live.Runs(ctx, "j", 1, ormlock.WithLedgerTable("no_such_ledger")); err == nil || !strings.Contains(err.Error(), "create it with Migrate") {
			t.Errorf("Runs on a missing table: %v", err)
		}
	})
}

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
		// the running row's run holds its lock while Prune runs, so it is
		// not stale and stays (a running row whose lock is free is stale,
		// and Prune deletes it when old: TestRunsStale)
		var n int64
		err := r.Session(ctx, ormlock.RunKey("other", time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)), func(context.Context) error {
			var err error
			n, err = r.Prune(ctx, 24*time.Hour, opt)
			return err
		})
		if err != nil || n != 2 {
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

// Runs lists a job's runs, newest slot first, with their outcome, owner,
// error and server-side times in UTC, whatever order they ran in.
func TestConformanceRuns(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r, tbl := openWithLedger(t, a, k)
		job := "audit-" + t.Name()
		opt := ormlock.WithLedgerTable(tbl)
		berlin, err := time.LoadLocation("Europe/Berlin") // time/tzdata: never missing
		if err != nil {
			t.Fatal(err)
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

// fillLedger inserts n finished rows of job with status, one per second
// from first, in multi-row statements.
func fillLedger(t *testing.T, k testdb.Kind, r runner, tbl, job, status string, first time.Time, n int) {
	t.Helper()
	for done := 0; done < n; {
		var vals []string
		for ; done < n && len(vals) < 500; done++ {
			ts := first.Add(time.Duration(done) * time.Second).UTC().Format("2006-01-02 15:04:05")
			if k.Dialect() == "postgres" {
				ts += "+00"
			}
			vals = append(vals, fmt.Sprintf("('%s', '%s', '%s', 'filler', '%s', '%s')", job, ts, status, ts, ts))
		}
		q := "INSERT INTO " + tbl + " (job, slot, status, owner, started_at, finished_at) VALUES " + strings.Join(vals, ", ")
		if _, err := r.Pool().Exec(q); err != nil {
			t.Fatalf("fill ledger: %v", err)
		}
	}
}

// Prune deletes old finished rows in batches (more than one batch here),
// keeps recent rows, and never deletes a running claim, even an old one
// whose run is in progress.
func TestPrune(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r, tbl := openWithLedger(t, a, k)
		opt := ormlock.WithLedgerTable(tbl)
		old := time.Now().Add(-30 * 24 * time.Hour).Truncate(time.Second)
		fillLedger(t, k, r, tbl, "prune-done", "done", old, 2300)
		fillLedger(t, k, r, tbl, "prune-failed", "failed", old, 40)
		fillLedger(t, k, r, tbl, "prune-recent", "done", time.Now().Add(-time.Hour), 30)

		// a run of an old slot still going on: its row is 'running'
		oldSlot := old.Add(-time.Hour)
		started, release := make(chan struct{}), make(chan struct{})
		ran := make(chan error, 1)
		go func() {
			ran <- r.RunOnce(ctx, "prune-running", oldSlot, func(txn) error {
				close(started)
				<-release
				return nil
			}, opt, ormlock.WithClaim())
		}()
		<-started

		n, err := r.Prune(ctx, 24*time.Hour, opt)
		if err != nil {
			t.Fatalf("Prune: %v", err)
		}
		if n != 2340 {
			t.Errorf("Prune deleted %d rows, want 2340", n)
		}
		for job, want := range map[string]int{"prune-done": 0, "prune-failed": 0, "prune-recent": 30, "prune-running": 1} {
			if got := len(runsOf(t, r, tbl, job)); got != want {
				t.Errorf("%s: %d rows left, want %d", job, got, want)
			}
		}
		close(release)
		if err := <-ran; err != nil {
			t.Fatalf("the running claim's RunOnce: %v", err)
		}
		if rs := runsOf(t, r, tbl, "prune-running"); len(rs) != 1 || rs[0].Status != "done" {
			t.Fatalf("the running claim after Prune: %+v", rs)
		}
		// now finished, and old: the next Prune takes it
		if n, err := r.Prune(ctx, 24*time.Hour, opt); err != nil || n != 1 {
			t.Fatalf("second Prune: %d, %v; want 1", n, err)
		}
	})
}

// A claim-mode run whose lock is gone while its row still says running is
// stale: here its lock connection is killed while fn goes on (as when the
// run's process dies, which chaos.TestKillClaimedRun does with kill -9).
// Runs reports it stale on every adapter and server, Prune deletes it once
// its slot is older than Prune's window and keeps a recent one, and a
// running row whose lock is held is never stale and never pruned, however
// old its slot. The run that lost its row gets ErrLockLost when it ends.
func TestRunsStale(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r, tbl := openWithLedger(t, a, k)
		opt := ormlock.WithLedgerTable(tbl)
		// a ping's timeout is its interval: 250ms leaves a loaded machine
		// room to answer, and still finds the killed connection at once
		opts := []ormlock.Option{opt, ormlock.WithClaim(), ormlock.WithKeepalive(250 * time.Millisecond)}
		job := "stale-" + a.name
		old := time.Now().Add(-30 * 24 * time.Hour).UTC().Truncate(time.Hour)
		liveSlot, lostSlot := old, old.Add(time.Hour)
		recent := time.Now().Add(-time.Hour).UTC().Truncate(time.Hour)

		// fn of each run waits for its release, whatever its context says
		start := func(slot time.Time) (end func() error) {
			t.Helper()
			started, release := make(chan struct{}), make(chan struct{})
			ended := make(chan error, 1)
			go func() {
				ended <- r.RunOnce(ctx, job, slot, func(txn) error { close(started); <-release; return nil }, opts...)
			}()
			select {
			case <-started:
			case err := <-ended:
				t.Fatalf("RunOnce of %v: %v", slot, err)
			}
			var once sync.Once
			var err error
			end = func() error {
				once.Do(func() { close(release); err = <-ended })
				return err
			}
			t.Cleanup(func() { _ = end() })
			return end
		}
		endLive, endLost := start(liveSlot), start(lostSlot)
		h, err := r.Holder(ctx, ormlock.RunKey(job, lostSlot))
		if err != nil || !h.Held {
			t.Fatalf("Holder of the run's lock: %+v, %v", h, err)
		}
		testdb.Kill(t, k, h.PID)
		insertRunning(t, k, tbl, job, recent, "dead/1")

		// Runs: the killed run's row and the dead owner's are stale (the
		// server frees the lock as it ends the session: polled), the live
		// one never
		bySlot := func() map[time.Time]ormlock.Run {
			t.Helper()
			m := map[time.Time]ormlock.Run{}
			for _, run := range runsOf(t, r, tbl, job) {
				m[run.Slot] = run
			}
			return m
		}
		var rs map[time.Time]ormlock.Run
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			rs = bySlot()
			if rs[liveSlot].Stale {
				t.Fatalf("a run whose lock is held reported stale: %+v", rs[liveSlot])
			}
			if rs[lostSlot].Stale || time.Now().After(deadline) {
				break
			}
		}
		for _, slot := range []time.Time{lostSlot, recent} {
			if run := rs[slot]; !run.Stale || run.Status != "running" || !run.Finished.IsZero() {
				t.Fatalf("run of %v: %+v; want running and stale", slot, run)
			}
		}
		if run := rs[liveSlot]; run.Stale || run.Status != "running" {
			t.Fatalf("the live run: %+v; want running, not stale", run)
		}

		// Prune: the old stale row goes, the recent one and the live one stay
		if n, err := r.Prune(ctx, 24*time.Hour, opt); err != nil || n != 1 {
			t.Fatalf("Prune: %d, %v; want the old stale row deleted", n, err)
		}
		rs = bySlot()
		if _, ok := rs[lostSlot]; ok || len(rs) != 2 || !rs[recent].Stale || rs[liveSlot].Stale || rs[liveSlot].Status != "running" {
			t.Fatalf("after Prune: %+v; want the live run and the recent stale row", rs)
		}
		if err := endLost(); !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("the run whose lock was killed: %v, want ErrLockLost", err)
		}
		if err := endLive(); err != nil {
			t.Fatalf("the live run: %v", err)
		}
		// the recent stale slot is taken over by a later trigger of it
		if err := r.RunOnce(ctx, job, recent, func(txn) error { return nil }, opts...); err != nil {
			t.Fatalf("take the stale row over: %v", err)
		}
		rs = bySlot()
		for slot, run := range rs {
			if run.Stale || run.Status != "done" {
				t.Errorf("run of %v at the end: %+v; want done", slot, run)
			}
		}
		if n, err := r.Prune(ctx, 24*time.Hour, opt); err != nil || n != 1 {
			t.Fatalf("Prune of the live run, done: %d, %v; want 1", n, err)
		}
	})
}

// Runs read while claim-mode runs start and end back to back never report
// one stale: each run records its end before it releases its lock, and
// Runs reads a row again when it finds its lock free (the deterministic
// case is internal/ledger's TestStaleRunEndsBetweenReads). One adapter
// carries it: the reads are the adapters' shared internal/ledger.
func TestRunsNeverStaleWhileRunning(t *testing.T) {
	a := adapters[0]
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		r, tbl := openWithLedger(t, a, k)
		opt := ormlock.WithLedgerTable(tbl)
		job := "never-stale"
		const runs = 40
		var wrote sync.WaitGroup
		wrote.Add(1)
		stop := make(chan struct{})
		go func() {
			defer wrote.Done()
			defer close(stop)
			for i := range runs {
				if err := r.RunOnce(ctx, job, testdb.Slot(i), func(txn) error { return nil }, opt, ormlock.WithClaim()); err != nil {
					t.Errorf("RunOnce %d: %v", i, err)
					return
				}
			}
		}()
		reads, running := 0, 0
		var failure error
		for done := false; !done && failure == nil; reads++ {
			select {
			case <-stop:
				done = true
			default:
			}
			rs, err := r.Runs(ctx, job, 3, opt)
			if err != nil {
				failure = fmt.Errorf("Runs: %w", err)
			}
			for _, run := range rs {
				if run.Stale {
					failure = fmt.Errorf("a run reported stale while runs start and end: %+v", run)
				}
				if run.Status == "running" {
					running++
				}
			}
		}
		wrote.Wait()
		if failure != nil {
			t.Fatal(failure)
		}
		t.Logf("%d reads during %d runs; %d saw a run going on", reads, runs, running)
	})
}

// insertRunning writes a 'running' row of (job, slot) by owner into tbl, as
// a run whose process died leaves it: nobody holds its lock.
func insertRunning(t *testing.T, k testdb.Kind, tbl, job string, slot time.Time, owner string) {
	t.Helper()
	q := "INSERT INTO " + tbl + " (job, slot, status, owner, started_at) VALUES ($1, $2, 'running', $3, $2)"
	args := []any{job, slot, owner}
	if k.Dialect() == "mysql" {
		q = "INSERT INTO " + tbl + " (job, slot, status, owner, started_at) VALUES (?, ?, 'running', ?, ?)"
		ts := slot.UTC().Format("2006-01-02 15:04:05")
		args = []any{job, ts, owner, ts}
	}
	if _, err := testdb.AdminDB(t, k).Exec(q, args...); err != nil {
		t.Fatal(err)
	}
}

// Bad input every adapter can get; the adapters test their own (a nil
// handle, a transaction).
func TestPruneBadInput(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			r := openRunner(t, a, testdb.Postgres)
			ctx := context.Background()
			if _, err := r.Prune(ctx, 0); !errors.Is(err, ormlock.ErrInvalidArgument) {
				t.Errorf("olderThan 0: %v", err)
			}
			if _, err := r.Prune(ctx, time.Hour, ormlock.WithLedgerTable("x; drop")); !errors.Is(err, ormlock.ErrInvalidArgument) {
				t.Errorf("bad table: %v", err)
			}
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := r.Prune(cctx, time.Hour); !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled context: %v", err)
			}
		})
	}
}

// Pruning a large ledger does not hold up runs: claims of recent slots
// made while Prune works through 20,000 old rows each finish promptly. The
// ledger is the adapters' shared internal/ledger, so one adapter (the
// first) carries this slow test.
func TestPruneConcurrentRuns(t *testing.T) {
	a := adapters[0]
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		r, tbl := openWithLedger(t, a, k)
		opt := ormlock.WithLedgerTable(tbl)
		fillLedger(t, k, r, tbl, "prune-bulk", "done", time.Now().Add(-60*24*time.Hour).Truncate(time.Second), 20000)
		done := make(chan error, 1)
		var deleted int64
		start := time.Now()
		go func() {
			var err error
			deleted, err = r.Prune(ctx, 24*time.Hour, opt)
			done <- err
		}()
		var slowest time.Duration
		runs := 0
		base := time.Now().Truncate(time.Hour) // recent slots, one per run
		for pruning := true; pruning; runs++ {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Prune: %v", err)
				}
				pruning = false
			default:
			}
			t0 := time.Now()
			err := r.RunOnce(ctx, "prune-live", base.Add(time.Duration(runs)*time.Hour), func(txn) error { return nil }, opt)
			if err != nil {
				t.Fatalf("RunOnce while pruning: %v", err)
			}
			slowest = max(slowest, time.Since(t0))
		}
		t.Logf("Prune deleted %d rows in %v; %d runs meanwhile, the slowest took %v", deleted, time.Since(start), runs, slowest)
		if deleted != 20000 {
			t.Errorf("Prune deleted %d rows, want 20000", deleted)
		}
		if slowest > 2*time.Second {
			t.Errorf("a run took %v while Prune worked", slowest)
		}
	})
}

// Prune deletes the rows of its own namespace only (WithNamespace, none by
// default), the rows Runs reads: services sharing a ledger table prune
// their own runs, never another's.
func TestPruneNamespaces(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r, tbl := openWithLedger(t, a, k)
		opt := ormlock.WithLedgerTable(tbl)
		old := time.Now().Add(-30 * 24 * time.Hour).Truncate(time.Second)
		nss := []string{"", "billing", "mail"}
		for _, ns := range nss {
			for i := range 3 {
				if err := r.RunOnce(ctx, "prune-ns", old.Add(time.Duration(i)*time.Hour), func(txn) error { return nil }, opt, ormlock.WithNamespace(ns)); err != nil {
					t.Fatalf("RunOnce in %q: %v", ns, err)
				}
			}
		}
		left := func(ns string) int {
			t.Helper()
			rs, err := r.Runs(ctx, "prune-ns", 10, opt, ormlock.WithNamespace(ns))
			if err != nil {
				t.Fatalf("Runs in %q: %v", ns, err)
			}
			return len(rs)
		}
		if n, err := r.Prune(ctx, 24*time.Hour, opt, ormlock.WithNamespace("billing")); err != nil || n != 3 {
			t.Fatalf("Prune in billing: %d, %v; want 3", n, err)
		}
		if got := []int{left(""), left("billing"), left("mail")}; got[0] != 3 || got[1] != 0 || got[2] != 3 {
			t.Fatalf("rows left in \"\", billing, mail: %v; want [3 0 3]", got)
		}
		if n, err := r.Prune(ctx, 24*time.Hour, opt); err != nil || n != 3 {
			t.Fatalf("Prune without a namespace: %d, %v; want 3", n, err)
		}
		if got := []int{left(""), left("billing"), left("mail")}; got[0] != 0 || got[1] != 0 || got[2] != 3 {
			t.Fatalf("rows left in \"\", billing, mail: %v; want [0 0 3]", got)
		}
	})
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
