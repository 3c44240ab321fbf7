package entlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/enttest/ent"
	"github.com/ormlock/ormlock/internal/testdb"
)

// Prune deletes old finished rows in batches, keeps recent ones and never a
// running claim (an old slot whose run is in progress).
func TestPrune(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		client, sqlDB := openEnt(t, k)
		tbl := ledgerTable(t, k, client)
		opt := ormlock.WithLedgerTable(tbl)
		old := time.Now().Add(-30 * 24 * time.Hour).Truncate(time.Second)
		for _, f := range []struct {
			job, status string
			first       time.Time
			n           int
		}{{"prune-done", "done", old, 1500}, {"prune-failed", "failed", old, 20}, {"prune-recent", "done", time.Now().Add(-time.Hour), 10}} {
			var vals []string
			for i := range f.n {
				ts := f.first.Add(time.Duration(i) * time.Second).UTC().Format("2006-01-02 15:04:05")
				if k.Dialect() == "postgres" {
					ts += "+00"
				}
				vals = append(vals, fmt.Sprintf("('%s', '%s', '%s', 'filler', '%s', '%s')", f.job, ts, f.status, ts, ts))
			}
			if _, err := sqlDB.Exec("INSERT INTO " + tbl + " (job, slot, status, owner, started_at, finished_at) VALUES " + strings.Join(vals, ", ")); err != nil {
				t.Fatalf("fill ledger: %v", err)
			}
		}
		started, release := make(chan struct{}), make(chan struct{})
		ran := make(chan error, 1)
		go func() {
			ran <- entlock.RunOnce(ctx, client, "prune-running", old.Add(-time.Hour), func(*ent.Tx) error {
				close(started)
				<-release
				return nil
			}, opt, ormlock.WithClaim())
		}()
		<-started
		n, err := entlock.Prune(ctx, client, 24*time.Hour, opt)
		if err != nil || n != 1520 {
			t.Errorf("Prune: %d, %v; want 1520 rows deleted", n, err)
		}
		for job, want := range map[string]int{"prune-done": 0, "prune-failed": 0, "prune-recent": 10, "prune-running": 1} {
			if got := len(runs(t, client, tbl, job)); got != want {
				t.Errorf("%s: %d rows left, want %d", job, got, want)
			}
		}
		close(release)
		if err := <-ran; err != nil {
			t.Fatalf("the running claim's RunOnce: %v", err)
		}
		if _, err := entlock.Prune(ctx, client, 0, opt); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Errorf("olderThan 0: %v", err)
		}
	})
}
