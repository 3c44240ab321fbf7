package main

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

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
