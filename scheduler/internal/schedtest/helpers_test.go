// Package schedtest_test holds the scheduler module's tests on real
// servers. They live in a directory no program imports because `go mod
// tidy` in a user's module loads the tests of every package the user
// imports: tests in package scheduler that import GORM and ent (as these
// do) would make every GORM user of the scheduler download ent, and every
// ent user GORM (measured by scripts/consumer-check).
package schedtest_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/gormtest"
)

// The scheduler module's tests run against the same ephemeral servers as
// the library's (internal/testdb is importable here: this module's path
// lies under github.com/ormlock/ormlock).
func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }

// forEachKind runs f once per real server kind, in parallel: the tests
// mostly wait for timers, so the servers' CPU is not the limit.
func forEachKind(t *testing.T, f func(t *testing.T, k testdb.Kind)) {
	t.Helper()
	forKinds(t, testdb.Kinds(), f)
}

// forKinds is forEachKind on the given kinds.
func forKinds(t *testing.T, kinds []testdb.Kind, f func(t *testing.T, k testdb.Kind)) {
	t.Helper()
	for _, k := range kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			f(t, k)
		})
	}
}

// openGorm opens a new pool on the shared server of kind k (one per
// replica, as separate processes would have), and asserts after the test
// that no lock and no connection leaked.
func openGorm(t *testing.T, k testdb.Kind) *gorm.DB {
	t.Helper()
	db, _ := gormtest.Open(t, k)
	return db
}

// migrate creates the ledger table (idempotent).
func migrate(t *testing.T, db *gorm.DB) {
	t.Helper()
	if err := gormlock.Migrate(db); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
}

// openMigrated opens GORM on a new pool of kind k (openGorm) with the
// ledger table migrated.
func openMigrated(t *testing.T, k testdb.Kind) *gorm.DB {
	t.Helper()
	db := openGorm(t, k)
	migrate(t, db)
	return db
}

// jobName is a job name of its own for each (sub)test and run, so that
// repeated runs (-count) never meet old ledger rows.
func jobName(t *testing.T) string {
	return strings.ReplaceAll(t.Name(), "/", ".") + "@" + time.Now().UTC().Format("150405.000000")
}

// everySecond is the per-second schedule the tests use.
func everySecond(t *testing.T) ormlock.Schedule {
	t.Helper()
	s, err := ormlock.Every(time.Second, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// everyHour is the hourly schedule (nil loc: UTC).
func everyHour(t *testing.T) ormlock.Schedule {
	t.Helper()
	s, err := ormlock.Every(time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// hourlyMidway returns an hourly schedule (UTC) whose slots lie half an
// hour from now's minute, and its current slot: now is about 30 minutes
// into that slot, so a test on the real clock that lasts less than 29
// minutes sees one current slot.
func hourlyMidway(t *testing.T) (ormlock.Schedule, time.Time) {
	t.Helper()
	now := time.Now()
	s, err := ormlock.Cron(fmt.Sprintf("%d * * * *", (now.UTC().Minute()+30)%60), time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	return s, s.Slot(now)
}

// skewed returns a clock that is off by d.
func skewed(d time.Duration) func() time.Time {
	return func() time.Time { return time.Now().Add(d) }
}

// tally counts the runs of one job, in process: who ran, how many at once.
type tally struct {
	mu      sync.Mutex
	runs    []string // replica of each run, in order
	holders int      // runs going on right now
	maxHold int
}

func (c *tally) enter(replica string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.runs = append(c.runs, replica)
	c.holders++
	c.maxHold = max(c.maxHold, c.holders)
}

func (c *tally) exit() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holders--
}

func (c *tally) snapshot() (runs []string, maxHold int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.runs...), c.maxHold
}

// checkLedger asserts the invariants of a job that ran on several replicas
// for about want slots: every ledger row is done, no slot has more than one
// run (the primary key already makes that so; the in-process count must
// agree), the in-process count equals the ledger's, and the number of slots
// is within one of want (a loaded machine may shift a trigger at either
// end). It returns the ledger's runs, oldest first.
func checkLedger(t *testing.T, db *gorm.DB, job string, tl *tally, want int) []ormlock.Run {
	t.Helper()
	// A run whose claim raced the scheduler's shutdown is still under way
	// when Shutdown returns (gocron runs a job it has locked, then
	// unlocks): wait for it to finish before counting.
	var runs []ormlock.Run
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var err error
		if runs, err = gormlock.Runs(db, job, 1000); err != nil {
			t.Fatalf("Runs: %v", err)
		}
		running := false
		for _, r := range runs {
			running = running || r.Status == "running"
		}
		if !running || time.Now().After(deadline) {
			break
		}
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].Slot.Before(runs[j].Slot) })
	// A claim of the last slot that gocron's shutdown cancelled before the
	// run started (after the claim was written, or while it was read back)
	// is recorded as failed, to be retried: not a run.
	if n := len(runs); n > 0 && runs[n-1].Status == "failed" &&
		(strings.Contains(runs[n-1].Error, "gocron's context ended before the run started") ||
			strings.Contains(runs[n-1].Error, "the claim failed") && strings.Contains(runs[n-1].Error, context.Canceled.Error())) {
		runs = runs[:n-1]
	}
	seen := map[time.Time]bool{}
	owners := map[string]int{}
	for _, r := range runs {
		if r.Status != "done" {
			t.Errorf("slot %s: status %s (owner %s, error %q)", r.Slot.Format(time.RFC3339), r.Status, r.Owner, r.Error)
		}
		if seen[r.Slot] {
			t.Errorf("slot %s: two ledger rows", r.Slot.Format(time.RFC3339))
		}
		seen[r.Slot] = true
		owners[r.Owner]++
	}
	inProc, maxHold := tl.snapshot()
	if len(inProc) != len(runs) {
		t.Errorf("the job ran %d times in process, the ledger has %d runs: a duplicate run", len(inProc), len(runs))
	}
	if maxHold > 1 {
		t.Errorf("%d runs at once", maxHold)
	}
	for i := 1; i < len(runs); i++ {
		if gap := runs[i].Slot.Sub(runs[i-1].Slot); gap != time.Second {
			t.Logf("slots %s and %s are %v apart (a trigger missed its slot on every replica)", runs[i-1].Slot.Format(time.RFC3339), runs[i].Slot.Format(time.RFC3339), gap)
		}
	}
	if len(runs) < want-1 || len(runs) > want+1 {
		t.Errorf("%d slots run, want %d±1", len(runs), want)
	}
	t.Logf("%d slots, %d runs in process, by owner %v", len(runs), len(inProc), owners)
	return runs
}

// gormHolder returns the server connection id holding the lock name.
func gormHolder(db *gorm.DB, name string) (int64, error) {
	h, err := gormlock.Holder(db, name)
	if err != nil {
		return 0, err
	}
	if !h.Held {
		return 0, fmt.Errorf("%q is not held", name)
	}
	return h.PID, nil
}
