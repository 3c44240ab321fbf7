package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/examples/internal/demo"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/gormtest"
	"github.com/ormlock/ormlock/keyhash"
)

// The example module's tests run against the same ephemeral servers as the
// library's (internal/testdb is importable here: this module's path lies
// under github.com/ormlock/ormlock).
func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }

func openGorm(t *testing.T, k testdb.Kind) *gorm.DB {
	t.Helper()
	db, _ := gormtest.Open(t, k)
	return db
}

// histCount returns the number of observations of histogram name for lock.
func histCount(t *testing.T, reg prometheus.Gatherer, name, lock string) uint64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "lock" && l.GetValue() == lock {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

// Metrics fed by real lock events from real servers.
func TestMetricsFromRealEvents(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		reg := prometheus.NewRegistry()
		m, err := NewMetrics(reg)
		if err != nil {
			t.Fatal(err)
		}
		a, b := openGorm(t, k), openGorm(t, k)
		obs := ormlock.WithObserver(m)
		d := k.Dialect()
		key := "prom-" + t.Name()

		// one replica runs, the other finds the lock held, then times out
		err = gormlock.Transaction(a, key, func(tx *gorm.DB) error {
			if err := gormlock.Transaction(b, key, func(*gorm.DB) error { return errors.New("ran twice") }, obs); !errors.Is(err, ormlock.ErrNotAcquired) {
				return fmt.Errorf("held: %v", err)
			}
			return tx.Exec("SELECT 1").Error
		}, obs)
		if err != nil {
			t.Fatal(err)
		}
		// a wait cut short by the context's deadline, on a key of its own
		tkey := key + "-timeout"
		err = gormlock.Transaction(a, tkey, func(tx *gorm.DB) error {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			if err := gormlock.Transaction(b.WithContext(ctx), tkey, func(*gorm.DB) error { return errors.New("ran twice") }, obs, ormlock.WithWait(time.Minute)); !errors.Is(err, ormlock.ErrNotAcquired) {
				return fmt.Errorf("timeout: %v", err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := testutil.ToFloat64(m.notAcquired.WithLabelValues("Transaction", d, tkey, "timeout")); got != 1 {
			t.Errorf("not_acquired{reason=timeout} = %v, want 1", got)
		}

		// fn failing still takes and releases the lock
		boom := errors.New("boom")
		if err := gormlock.Transaction(a, key, func(*gorm.DB) error { return boom }, obs); err != boom {
			t.Fatal(err)
		}
		if got := testutil.ToFloat64(m.acquired.WithLabelValues("Transaction", d, key)); got != 2 {
			t.Errorf("acquired = %v, want 2", got)
		}
		if got := testutil.ToFloat64(m.notAcquired.WithLabelValues("Transaction", d, key, "held")); got != 1 {
			t.Errorf("not_acquired{reason=held} = %v, want 1", got)
		}
		if got := histCount(t, reg, "ormlock_held_seconds", key); got != 2 {
			t.Errorf("held_seconds count = %d, want 2", got)
		}
		if got := histCount(t, reg, "ormlock_acquire_wait_seconds", key); got != 2 {
			t.Errorf("acquire_wait_seconds count = %d, want 2", got)
		}

		// a namespace shows in the lock label
		if err := gormlock.Transaction(a, key, func(*gorm.DB) error { return nil }, obs, ormlock.WithNamespace("billing")); err != nil {
			t.Fatal(err)
		}
		if got := testutil.ToFloat64(m.acquired.WithLabelValues("Transaction", d, "billing/"+key)); got != 1 {
			t.Errorf("acquired{lock=billing/...} = %v, want 1", got)
		}

		// a Session whose lock connection is killed
		err = gormlock.Session(a, key, func(ctx context.Context) error {
			h, err := gormlock.Holder(a, key)
			if err != nil || !h.Held {
				return fmt.Errorf("holder %v: %v", h, err)
			}
			t.Logf("killing the Session's lock connection: %s", h)
			testdb.Kill(t, k, h.PID)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(30 * time.Second):
				return errors.New("loss not seen within 30s")
			}
		}, obs, ormlock.WithKeepalive(100*time.Millisecond))
		if !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("Session: %v", err)
		}
		if got := testutil.ToFloat64(m.lost.WithLabelValues("Session", d, key)); got != 1 {
			t.Errorf("lost = %v, want 1", got)
		}

		// an unreachable database
		closed := testdb.Open(t, k)
		cdb := gormtest.On(t, d, closed)
		closed.Close()
		if err := gormlock.Transaction(cdb, key, func(*gorm.DB) error { return nil }, obs); err == nil {
			t.Fatal("no error from a closed pool")
		}
		if got := testutil.ToFloat64(m.notAcquired.WithLabelValues("Transaction", d, key, "error")); got != 1 {
			t.Errorf("not_acquired{reason=error} = %v, want 1", got)
		}

		if d == "mysql" {
			// the lock released behind ormlock's back: RELEASE_LOCK fails
			err := gormlock.Transaction(a, key, func(tx *gorm.DB) error {
				return tx.Exec("SELECT RELEASE_LOCK(?)", keyhash.MySQLName("", key)).Error
			}, obs)
			if err != nil {
				t.Fatal(err)
			}
			if got := testutil.ToFloat64(m.releaseFailed.WithLabelValues("Transaction", d, key)); got != 1 {
				t.Errorf("release_failures = %v, want 1", got)
			}
		}
		var out bytes.Buffer
		if err := demo.PrintMetrics(&out, reg); err != nil {
			t.Fatal(err)
		}
		t.Logf("metrics:\n%s", out.String())
	})
}

// The runnable main, a few rounds against each real server.
func TestRunRounds(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		t.Cleanup(func() { testdb.AssertNoLeaks(t, k) })
		job := "prom-run-" + string(k)
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), []string{"-dsn", testdb.DSN(t, k), "-rounds", "2", "-replicas", "3", "-work", "50ms", "-job", job}, &stdout, &stderr)
		if err != nil {
			t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
		}
		out := stdout.String()
		acquired := metricValue(t, out, `ormlock_acquired_total{dialect="`+k.Dialect()+`",lock="`+job+`",verb="Transaction"}`)
		held := metricValue(t, out, `ormlock_not_acquired_total{dialect="`+k.Dialect()+`",lock="`+job+`",reason="held",verb="Transaction"}`)
		t.Logf("2 rounds x 3 replicas: acquired %v, not_acquired %v", acquired, held)
		// on a loaded machine a late replica may find the lock already
		// released and run too; every call is counted once either way
		if acquired < 2 || acquired+held != 6 {
			t.Errorf("acquired %v + not_acquired %v, want >= 2 and 6 calls in all\n%s", acquired, held, out)
		}
		if !strings.Contains(stderr.String(), `msg="ormlock: released"`) {
			t.Errorf("no slog line for the release:\n%s", stderr.String())
		}
	})
	t.Run("no dsn", func(t *testing.T) {
		t.Setenv("ORMLOCK_DSN", "")
		var stderr bytes.Buffer
		if err := run(context.Background(), nil, &bytes.Buffer{}, &stderr); err == nil || !strings.Contains(err.Error(), "-dsn") {
			t.Fatalf("err = %v", err)
		}
	})
}

// metricValue returns the value of the series line starting with series (0
// when absent).
func metricValue(t *testing.T, text, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			var v float64
			if _, err := fmt.Sscan(rest, &v); err != nil {
				t.Fatalf("parse %q: %v", line, err)
			}
			return v
		}
	}
	return 0
}

// RunOnce's key has the slot in it, so labelling by key would make new
// series for every run. The lock label of a RunOnce event is its job: ten
// slots of one job (each run, then found done) make one series per metric.
func TestMetricsRunOnceLabelledByJob(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := openGorm(t, k)
		table := "prom_runs_" + string(k)
		t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + table) })
		if err := gormlock.Migrate(db, ormlock.WithLedgerTable(table)); err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		m, err := NewMetrics(reg)
		if err != nil {
			t.Fatal(err)
		}
		opts := []ormlock.Option{ormlock.WithObserver(m), ormlock.WithLedgerTable(table), ormlock.WithNamespace("billing")}
		job := "prom-nightly-" + string(k)
		first := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
		const slots = 10
		for i := range slots {
			slot := first.AddDate(0, 0, i)
			for range 2 { // the run, then ErrAlreadyDone
				err := gormlock.RunOnce(db, job, slot, func(*gorm.DB) error { return nil }, opts...)
				if err != nil && !errors.Is(err, ormlock.ErrAlreadyDone) {
					t.Fatal(err)
				}
			}
		}
		lock := "billing/" + job
		d := k.Dialect()
		if got := testutil.ToFloat64(m.acquired.WithLabelValues("RunOnce", d, lock)); got != 2*slots {
			t.Errorf("acquired{lock=%q} = %v, want %d", lock, got, 2*slots)
		}
		if got := testutil.ToFloat64(m.alreadyDone.WithLabelValues("RunOnce", d, lock)); got != slots {
			t.Errorf("already_done{lock=%q} = %v, want %d", lock, got, slots)
		}
		for _, c := range []struct {
			name string
			c    prometheus.Collector
		}{{"acquired", m.acquired}, {"already_done", m.alreadyDone}, {"wait", m.wait}, {"held", m.held}} {
			if n := testutil.CollectAndCount(c.c); n != 1 {
				t.Errorf("%s: %d series, want 1 for one job", c.name, n)
			}
		}
	})
}
