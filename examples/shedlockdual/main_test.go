package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/sqlsched"
	"github.com/ormlock/ormlock/sqllock"
)

func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }

// jobName is a job of its own per test and run.
func jobName(t *testing.T) string {
	return "sld-" + strings.ReplaceAll(t.Name(), "/", "-")[len("Test"):] + time.Now().UTC().Format("150405.000")
}

// The program: two Go replicas of the "both" release and a ShedLock node
// run a per-second job for three seconds; no two runs overlap, every Go
// run is under its lock, and ormlock's ledger has each Go run once. The
// node fires 400 ms late, so that the Go replicas take most seconds.
func TestShedLockDual(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		t.Cleanup(func() { testdb.AssertNoLeaks(t, k) })
		var out, errOut bytes.Buffer
		err := run(context.Background(), []string{"-dsn", testdb.DSN(t, k), "-seconds", "3", "-node-lag", "400ms", "-job", jobName(t)}, &out, &errOut)
		t.Logf("%s%s", out.String(), errOut.String())
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), " 0 faults") || !strings.Contains(out.String(), "ran: go-") {
			t.Fatalf("output:\n%s", out.String())
		}
	})
}

// The dual Locker against a ShedLock node, step by step: while the node
// holds ShedLock's lease the Go replica skips and claims nothing in
// ormlock's ledger; once the lease has run out it takes the lease, then
// the slot, and its wrapped task runs under the slot's lock; the node is
// refused meanwhile, and for lockAtLeastFor after Unlock; the ledger
// records the run.
func TestLockerAgainstShedLockNode(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		db := testdb.Open(t, k)
		t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
		pg := k.Dialect() == "postgres"
		if err := createShedLockTable(ctx, db, pg); err != nil {
			t.Fatal(err)
		}
		if err := sqllock.Migrate(ctx, db); err != nil {
			t.Fatal(err)
		}
		job := jobName(t)
		slot := time.Date(2036, 1, 1, 2, 0, 0, 0, time.UTC)
		at2, err := ormlock.Cron("0 2 * * *", time.UTC)
		if err != nil {
			t.Fatal(err)
		}
		next, err := scheduler.NewLocker(sqlsched.Backend(db, ormlock.WithOwner("go-a")), at2,
			scheduler.WithClock(func() time.Time { return slot.Add(time.Second) }))
		if err != nil {
			t.Fatal(err)
		}
		goLease := &Lease{DB: db, Postgres: pg, Owner: "go-a", AtMost: time.Minute, AtLeast: time.Hour}
		dual := Locker{Lease: goLease, Next: next}
		node := &Lease{DB: db, Postgres: pg, Owner: "shedlock-node", AtMost: time.Minute}
		var seen struct {
			held bool
			slot time.Time
		}
		task := next.Task(job, func(ctx context.Context) error {
			seen.held = ormlock.Held(ctx)
			seen.slot, _ = ormlock.Slot(ctx)
			return nil
		})
		gctx, cancel := context.WithCancel(ctx) // gocron's job context
		defer cancel()

		release, err := node.Take(ctx, job)
		if err != nil {
			t.Fatalf("the node's lease: %v", err)
		}
		if _, err := dual.Lock(gctx, job); !errors.Is(err, ormlock.ErrNotAcquired) {
			t.Fatalf("Lock while the node holds the lease: %v, want ErrNotAcquired", err)
		}
		if runs := ledger(t, db, job); len(runs) != 0 {
			t.Fatalf("a refusal by the lease claimed the slot: %+v", runs)
		}
		if err := release(); err != nil { // AtLeast 0: the lease ends now
			t.Fatal(err)
		}

		held, err := dual.Lock(gctx, job)
		if err != nil {
			t.Fatalf("Lock once the lease ran out: %v", err)
		}
		if _, err := node.Take(ctx, job); !errors.Is(err, ormlock.ErrNotAcquired) {
			t.Fatalf("the node's lease while the Go replica runs: %v, want ErrNotAcquired", err)
		}
		if err := task(gctx); err != nil {
			t.Fatal(err)
		}
		if !seen.held || !seen.slot.Equal(slot) {
			t.Errorf("the task's context: held %v, slot %v; want held, %v", seen.held, seen.slot, slot)
		}
		if err := held.Unlock(gctx); err != nil {
			t.Fatal(err)
		}
		if runs := ledger(t, db, job); len(runs) != 1 || runs[0].Status != "done" || runs[0].Owner != "go-a" || !runs[0].Slot.Equal(slot) {
			t.Fatalf("ledger: %+v", runs)
		}
		// lockAtLeastFor: the lease outlives the run, for nodes firing late
		if _, err := node.Take(ctx, job); !errors.Is(err, ormlock.ErrNotAcquired) {
			t.Fatalf("the node's lease after the run, within lockAtLeastFor: %v, want ErrNotAcquired", err)
		}
		var by string
		if err := db.QueryRowContext(ctx, q(pg, "SELECT locked_by FROM shedlock WHERE name = $1"), job).Scan(&by); err != nil || by != "go-a" {
			t.Fatalf("shedlock row: locked_by %q, %v", by, err)
		}
	})
}

// ledger returns ormlock's runs of job.
func ledger(t *testing.T, db *sql.DB, job string) []ormlock.Run {
	t.Helper()
	runs, err := sqllock.Runs(context.Background(), db, job, 10)
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

// q returns a PostgreSQL statement with MySQL's placeholders when !pg.
func q(pg bool, s string) string {
	if pg {
		return s
	}
	return strings.ReplaceAll(s, "$1", "?")
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{{}, {"-dsn", "x", "extra"}, {"-dsn", "x", "-work", "1s"}} {
		var out bytes.Buffer
		if err := run(context.Background(), args, &out, &out); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
