package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/enttest"
	"github.com/ormlock/ormlock/internal/enttest/ent"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
)

// slotAt returns a distinct, deterministic slot per index.
func slotAt(i int) time.Time {
	return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Hour)
}

// maxOf raises m to n.
func maxOf(m *atomic.Int64, n int64) {
	for {
		cur := m.Load()
		if n <= cur || m.CompareAndSwap(cur, n) {
			return
		}
	}
}

// ledgerTable creates the test's own ledger table with entlock.Migrate and
// drops it after the test.
func ledgerTable(t *testing.T, k testdb.Kind, client *ent.Client) string {
	t.Helper()
	name := fmt.Sprintf("c_%016x", uint64(keyhash.Int64(t.Name())))
	t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + name) })
	if err := entlock.Migrate(context.Background(), client, ormlock.WithLedgerTable(name)); err != nil {
		t.Fatalf("Migrate(%s): %v", name, err)
	}
	return name
}

// gormlock.RunOnce and entlock.RunOnce share the lock and the ledger: for
// each slot, an instance on each ORM races, and exactly one runs it.
func TestRunOnceCrossORM(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		client, _ := enttest.Open(t, k)
		gdb := gormOpen(t, k)
		tbl := ledgerTable(t, k, client)
		if err := gormlock.Migrate(gdb, ormlock.WithLedgerTable(tbl)); err != nil {
			t.Fatalf("gormlock.Migrate on entlock's table: %v", err)
		}
		owner := enttest.Owner(t, k)
		job := "cross-" + t.Name()
		const slots = 24
		var inside, maxInside atomic.Int64
		wins := map[string]int{}
		start := time.Now()
		for s := range slots {
			// modes by slot: both transactional, both waiting, and each
			// ORM's claim mode against the other's transactional mode
			entOpts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithOwner("ent")}
			gormOpts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithOwner("gorm")}
			switch s % 4 {
			case 1:
				entOpts = append(entOpts, ormlock.WithWait(20*time.Second))
				gormOpts = append(gormOpts, ormlock.WithWait(20*time.Second))
			case 2:
				gormOpts = append(gormOpts, ormlock.WithClaim(), ormlock.WithWait(20*time.Second))
			case 3:
				entOpts = append(entOpts, ormlock.WithClaim(), ormlock.WithWait(20*time.Second))
			}
			barrier := make(chan struct{})
			var entErr, gormErr error
			var wg sync.WaitGroup
			wg.Go(func() {
				<-barrier
				entErr = entlock.RunOnce(ctx, client, job, slotAt(s), func(tx *ent.Tx) error {
					maxOf(&maxInside, inside.Add(1))
					defer inside.Add(-1)
					time.Sleep(2 * time.Millisecond)
					return tx.Item.Create().SetOwner(owner).SetN(s).Exec(ctx)
				}, entOpts...)
			})
			wg.Go(func() {
				<-barrier
				gormErr = gormlock.RunOnce(gdb.WithContext(ctx), job, slotAt(s), func(tx *gorm.DB) error {
					maxOf(&maxInside, inside.Add(1))
					defer inside.Add(-1)
					time.Sleep(2 * time.Millisecond)
					return tx.Exec("INSERT INTO items (owner, n) VALUES (?, ?)", owner, s).Error
				}, gormOpts...)
			})
			close(barrier)
			wg.Wait()
			lost := func(err error) bool {
				return errors.Is(err, ormlock.ErrAlreadyDone) || errors.Is(err, ormlock.ErrNotAcquired)
			}
			switch {
			case entErr == nil && lost(gormErr):
				wins["ent"]++
			case gormErr == nil && lost(entErr):
				wins["gorm"]++
			default:
				t.Fatalf("slot %d: ent %v, gorm %v: want exactly one run", s, entErr, gormErr)
			}
		}
		if maxInside.Load() != 1 {
			t.Fatalf("max runs at once = %d, want 1", maxInside.Load())
		}
		if n := enttest.Count(t, k, owner); n != slots {
			t.Fatalf("work rows = %d, want %d", n, slots)
		}
		rs, err := entlock.Runs(ctx, client, job, 1000, ormlock.WithLedgerTable(tbl))
		if err != nil {
			t.Fatal(err)
		}
		grs, err := gormlock.Runs(gdb, job, 1000, ormlock.WithLedgerTable(tbl))
		if err != nil || len(rs) != slots || len(grs) != slots {
			t.Fatalf("ledger: %d rows via entlock, %d via gormlock (%v), want %d", len(rs), len(grs), err, slots)
		}
		for i, r := range rs {
			g := grs[i]
			same := r.Job == g.Job && r.Slot.Equal(g.Slot) && r.Status == g.Status && r.Owner == g.Owner &&
				r.Started.Equal(g.Started) && r.Finished.Equal(g.Finished) && r.Error == g.Error
			if r.Status != ormlock.RunDone || !same {
				t.Fatalf("row %d: entlock %+v, gormlock %+v", i, r, grs[i])
			}
		}
		t.Logf("%d slots in %v: wins %v", slots, time.Since(start).Round(time.Millisecond), wins)

		// one after the other: whichever comes second finds the slot done
		next := slotAt(slots)
		if err := gormlock.RunOnce(gdb, job, next, func(*gorm.DB) error { return nil }, ormlock.WithLedgerTable(tbl)); err != nil {
			t.Fatal(err)
		}
		for _, mode := range []ormlock.Option{nil, ormlock.WithClaim()} {
			if err := entlock.RunOnce(ctx, client, job, next, func(*ent.Tx) error { return errors.New("ran twice") }, ormlock.WithLedgerTable(tbl), mode); !errors.Is(err, ormlock.ErrAlreadyDone) {
				t.Fatalf("entlock after gormlock: %v", err)
			}
		}
		next = slotAt(slots + 1)
		if err := entlock.RunOnce(ctx, client, job, next, func(*ent.Tx) error { return nil }, ormlock.WithLedgerTable(tbl)); err != nil {
			t.Fatal(err)
		}
		for _, mode := range []ormlock.Option{nil, ormlock.WithClaim()} {
			if err := gormlock.RunOnce(gdb, job, next, func(*gorm.DB) error { return errors.New("ran twice") }, ormlock.WithLedgerTable(tbl), mode); !errors.Is(err, ormlock.ErrAlreadyDone) {
				t.Fatalf("gormlock after entlock: %v", err)
			}
		}
	})
}
