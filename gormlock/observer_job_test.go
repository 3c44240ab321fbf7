package gormlock_test

import (
	"context"
	"sync"
	"testing"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/gormtest"
	"github.com/ormlock/ormlock/internal/testdb"
)

// RunOnce's events name the job (Event.Job), whose values are bounded,
// unlike its key, which has the slot in it; other verbs leave Job empty.
func TestObserverEventJob(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := gormtest.Open(t, k)
		tbl := ledgerTable(t, k, db)
		var mu sync.Mutex
		jobs := map[string][]string{} // verb -> Event.Job of each event
		obs := ormlock.WithObserver(ormlock.ObserverFunc(func(_ context.Context, e ormlock.Event) {
			mu.Lock()
			defer mu.Unlock()
			jobs[e.Verb] = append(jobs[e.Verb], e.Job)
		}))
		job := "job-" + t.Name()
		nop := func(*gorm.DB) error { return nil }
		for _, mode := range []ormlock.Option{nil, ormlock.WithClaim()} {
			if err := gormlock.RunOnce(db, job, testdb.Slot(0), nop, obs, ormlock.WithLedgerTable(tbl), mode); err != nil && mode == nil {
				t.Fatal(err)
			}
		}
		if err := gormlock.Transaction(db, job, nop, obs); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		// attempt, acquired, released; then attempt, acquired, already_done, released
		if got := jobs["RunOnce"]; len(got) != 7 {
			t.Fatalf("RunOnce events: %d, want 7", len(got))
		}
		for _, j := range jobs["RunOnce"] {
			if j != job {
				t.Errorf("RunOnce event Job = %q, want %q", j, job)
			}
		}
		for _, j := range jobs["Transaction"] {
			if j != "" {
				t.Errorf("Transaction event Job = %q, want empty", j)
			}
		}
	})
}
