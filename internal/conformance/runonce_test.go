package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
)

// contend runs RunOnce on three instances of adapter a (three pools) for
// each of slots slots, the instances of a slot released together, and checks
// that exactly one run per slot committed, that fn never ran twice at once,
// and (PostgreSQL) that no duplicate-key error reached the server log.
func contend(t *testing.T, a adapter, k testdb.Kind, slots int, extra ...ormlock.Option) {
	const instances = 3
	ctx := context.Background()
	rs := make([]runner, instances)
	for i := range rs {
		rs[i] = openRunner(t, a, k)
	}
	tbl := ledgerTable(t, k, rs[0])
	owner := enttest.Owner(t, k)
	job := "once-" + t.Name()
	off := testdb.LogOffset(t, k)

	insideBySlot := make([]testdb.Holders, slots)
	calls := make([]atomic.Int64, slots)
	var notAcquired, alreadyDone atomic.Int64
	start := time.Now()
	for s := range slots {
		slot := testdb.Slot(s)
		barrier := make(chan struct{})
		errs := make([]error, instances)
		var wg sync.WaitGroup
		for i, r := range rs {
			opts := append([]ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithOwner(fmt.Sprintf("instance-%d", i))}, extra...)
			if s%2 == 1 {
				// half the slots wait for the lock: the losers then find the
				// slot done
				opts = append(opts, ormlock.WithWait(20*time.Second))
			}
			wg.Go(func() {
				<-barrier
				errs[i] = r.RunOnce(ctx, job, slot, func(tx txn) error {
					defer insideBySlot[s].Enter()()
					calls[s].Add(1)
					time.Sleep(2 * time.Millisecond)
					return tx.Insert(owner, s)
				}, opts...)
			})
		}
		close(barrier)
		wg.Wait()
		wins := 0
		for i, err := range errs {
			switch {
			case err == nil:
				wins++
			case errors.Is(err, ormlock.ErrNotAcquired):
				notAcquired.Add(1)
			case errors.Is(err, ormlock.ErrAlreadyDone):
				alreadyDone.Add(1)
			default:
				t.Fatalf("slot %d, instance %d: unexpected error: %v", s, i, err)
			}
		}
		if wins != 1 {
			t.Fatalf("slot %d: %d instances ran it, want exactly 1 (errors %v)", s, wins, errs)
		}
	}
	elapsed := time.Since(start)

	for s := range slots {
		if got := insideBySlot[s].Max(); got != 1 {
			t.Fatalf("slot %d: max fn calls inside at once = %d, want 1", s, got)
		}
	}
	for s := range slots {
		if n := calls[s].Load(); n != 1 {
			t.Fatalf("slot %d: fn called %d times, want 1", s, n)
		}
	}
	if n := enttest.Count(t, k, owner); n != slots {
		t.Fatalf("committed work rows = %d, want %d", n, slots)
	}
	ledger := runsOf(t, rs[2], tbl, job)
	if len(ledger) != slots {
		t.Fatalf("ledger rows = %d, want %d", len(ledger), slots)
	}
	for _, r := range ledger {
		if r.Status != "done" || r.Finished.IsZero() || r.Error != "" || !strings.HasPrefix(r.Owner, "instance-") {
			t.Fatalf("ledger row %+v, want done by an instance", r)
		}
	}
	if alreadyDone.Load() == 0 {
		t.Errorf("no ErrAlreadyDone seen: the waiting losers did not exercise the ledger")
	}
	testdb.AssertNoDuplicateKeyLogged(t, k, off)
	t.Logf("%d slots x %d instances in %v: %d ErrNotAcquired, %d ErrAlreadyDone",
		slots, instances, elapsed.Round(time.Millisecond), notAcquired.Load(), alreadyDone.Load())
}

func TestConformanceRunOnceExactlyOncePerSlot(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) { contend(t, a, k, 50) })
}

func TestConformanceRunOnceClaimExactlyOncePerSlot(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) { contend(t, a, k, 20, ormlock.WithClaim()) })
}

// A failed fn leaves no row and no work, and a later trigger retries; a done
// slot is ErrAlreadyDone in either mode, without calling fn.
func TestConformanceRunOnceFailedFnRetries(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r := openRunner(t, a, k)
		tbl := ledgerTable(t, k, r)
		owner := enttest.Owner(t, k)
		job := "retry-" + t.Name()
		opt := ormlock.WithLedgerTable(tbl)
		lock := ormlock.RunKey(job, testdb.Slot(1))
		boom := errors.New("boom")
		err := r.RunOnce(ctx, job, testdb.Slot(1), func(tx txn) error {
			if err := tx.Insert(owner, 1); err != nil {
				return err
			}
			return boom
		}, opt)
		if err != boom {
			t.Fatalf("err = %v, want fn's error unchanged", err)
		}
		if rs := runsOf(t, r, tbl, job); len(rs) != 0 {
			t.Fatalf("ledger after a failed run: %+v, want no row", rs)
		}
		if n := enttest.Count(t, k, owner); n != 0 {
			t.Fatalf("work rows after a failed run = %d, want 0", n)
		}
		if !free(t, k, lock.String()) {
			t.Fatal("lock still held after a failed run")
		}
		// a later trigger retries
		if err := r.RunOnce(ctx, job, testdb.Slot(1), func(tx txn) error { return tx.Insert(owner, 1) }, opt); err != nil {
			t.Fatalf("retry: %v", err)
		}
		rs := runsOf(t, r, tbl, job)
		if len(rs) != 1 || rs[0].Status != "done" || !rs[0].Slot.Equal(testdb.Slot(1)) || rs[0].Job != job {
			t.Fatalf("ledger after retry: %+v", rs)
		}
		if n := enttest.Count(t, k, owner); n != 1 {
			t.Fatalf("work rows after retry = %d, want 1", n)
		}
		// already done, in either mode
		for _, mode := range []ormlock.Option{nil, ormlock.WithClaim()} {
			called := false
			err = r.RunOnce(ctx, job, testdb.Slot(1), func(txn) error { called = true; return nil }, opt, mode)
			if !errors.Is(err, ormlock.ErrAlreadyDone) || called {
				t.Fatalf("claim=%v: again: err=%v called=%v, want ErrAlreadyDone without calling fn", mode != nil, err, called)
			}
			if !strings.HasPrefix(err.Error(), "ormlock: ") || !strings.Contains(err.Error(), job) {
				t.Errorf("error text %q lacks the ormlock: prefix or the job", err)
			}
		}
		if !free(t, k, lock.String()) {
			t.Fatal("lock still held after ErrAlreadyDone")
		}
	})
}

// gormlock.RunOnce and entlock.RunOnce share the lock and the ledger: for
// each slot, an instance on each ORM races, and exactly one runs it.
func TestRunOnceCrossORM(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		client, _ := enttest.Open(t, k)
		gdb := gormOpen(t, k)
		tbl := ledgerTable(t, k, entLocker{client: client})
		if err := gormlock.Migrate(gdb, ormlock.WithLedgerTable(tbl)); err != nil {
			t.Fatalf("gormlock.Migrate on entlock's table: %v", err)
		}
		owner := enttest.Owner(t, k)
		job := "cross-" + t.Name()
		const slots = 24
		var in testdb.Holders
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
				entErr = entlock.RunOnce(ctx, client, job, testdb.Slot(s), func(tx *ent.Tx) error {
					defer in.Enter()()
					time.Sleep(2 * time.Millisecond)
					return tx.Item.Create().SetOwner(owner).SetN(s).Exec(ctx)
				}, entOpts...)
			})
			wg.Go(func() {
				<-barrier
				gormErr = gormlock.RunOnce(gdb.WithContext(ctx), job, testdb.Slot(s), func(tx *gorm.DB) error {
					defer in.Enter()()
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
		if in.Max() != 1 {
			t.Fatalf("max runs at once = %d, want 1", in.Max())
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
			if r.Status != "done" || !same {
				t.Fatalf("row %d: entlock %+v, gormlock %+v", i, r, grs[i])
			}
		}
		t.Logf("%d slots in %v: wins %v", slots, time.Since(start).Round(time.Millisecond), wins)

		// one after the other: whichever comes second finds the slot done
		next := testdb.Slot(slots)
		if err := gormlock.RunOnce(gdb, job, next, func(*gorm.DB) error { return nil }, ormlock.WithLedgerTable(tbl)); err != nil {
			t.Fatal(err)
		}
		for _, mode := range []ormlock.Option{nil, ormlock.WithClaim()} {
			if err := entlock.RunOnce(ctx, client, job, next, func(*ent.Tx) error { return errors.New("ran twice") }, ormlock.WithLedgerTable(tbl), mode); !errors.Is(err, ormlock.ErrAlreadyDone) {
				t.Fatalf("entlock after gormlock: %v", err)
			}
		}
		next = testdb.Slot(slots + 1)
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
