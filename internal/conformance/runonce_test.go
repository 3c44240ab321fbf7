package conformance_test

import (
	"context"
	"database/sql"
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
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent"
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
		r, tbl := openWithLedger(t, a, k)
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

// RunOnce in claim mode (WithClaim) on every adapter. Where the adapters
// differ, claimInTx says how: gormlock runs fn outside any transaction,
// entlock in a transaction of its own (entlock's own claim tests cover its
// commit order and its lazy transaction).

func TestRunOnceClaim(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r1, r2 := openRunner(t, a, k), openRunner(t, a, k)
		tbl := ledgerTable(t, k, r1)
		owner := enttest.Owner(t, k)
		job := "claim-" + t.Name()
		slot := testdb.Slot(3)
		opts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithClaim()}

		inFn, proceed := make(chan struct{}), make(chan struct{})
		result := make(chan error, 1)
		go func() {
			result <- r1.RunOnce(ctx, job, slot, func(tx txn) error {
				if err := tx.Insert(owner, 1); err != nil {
					return err
				}
				close(inFn)
				<-proceed
				return nil
			}, append(opts, ormlock.WithOwner("one"))...)
		}()
		select {
		case <-inFn:
		case err := <-result:
			t.Fatalf("claim run ended early: %v", err)
		}
		fail := func(format string, args ...any) {
			t.Helper()
			close(proceed)
			<-result
			t.Fatalf(format, args...)
		}
		// while fn runs: the running row is visible from another pool (no
		// commit waits for it); fn's own write is too when fn runs outside
		// a transaction, and is not when it runs in one
		rs := runsOf(t, r2, tbl, job)
		if len(rs) != 1 || rs[0].Status != "running" || rs[0].Owner != "one" || !rs[0].Finished.IsZero() || rs[0].Started.IsZero() {
			fail("ledger during the run: %+v, want one running row owned by one", rs)
		}
		want := 1
		if claimInTx(a) {
			want = 0
		}
		if n := enttest.Count(t, k, owner); n != want {
			fail("fn's write during the run: %d rows, want %d (fn in a transaction: %v)", n, want, claimInTx(a))
		}
		// the lock is held by the session connection, which Holder names
		h, err := r2.Holder(ctx, ormlock.RunKey(job, slot))
		if err != nil || !h.Held || h.PID == 0 {
			fail("Holder of the running slot: %v %v", h, err)
		}
		t.Logf("claim-mode holder: %s", h)
		// a second instance, in either mode, is turned away
		for _, mode := range []ormlock.Option{ormlock.WithClaim(), nil} {
			err := r2.RunOnce(ctx, job, slot, func(txn) error { return errors.New("must not run") },
				ormlock.WithLedgerTable(tbl), ormlock.WithOwner("two"), mode)
			if !errors.Is(err, ormlock.ErrNotAcquired) {
				fail("second instance during the run: %v, want ErrNotAcquired", err)
			}
		}
		close(proceed)
		if err := <-result; err != nil {
			t.Fatalf("claim run: %v", err)
		}
		rs = runsOf(t, r2, tbl, job)
		if len(rs) != 1 || rs[0].Status != "done" || rs[0].Owner != "one" || rs[0].Finished.Before(rs[0].Started) || rs[0].Duration < 0 {
			t.Fatalf("ledger after the run: %+v, want done", rs)
		}
		if n := enttest.Count(t, k, owner); n != 1 {
			t.Fatalf("work rows after the run = %d, want 1", n)
		}
		for _, mode := range []ormlock.Option{ormlock.WithClaim(), nil} {
			err := r2.RunOnce(ctx, job, slot, func(txn) error { return errors.New("must not run") }, ormlock.WithLedgerTable(tbl), mode)
			if !errors.Is(err, ormlock.ErrAlreadyDone) {
				t.Fatalf("after the run: %v, want ErrAlreadyDone", err)
			}
		}
		t.Logf("run took %v by the server's clock", rs[0].Duration)
	})
}

func TestRunOnceClaimFailureAndTakeover(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r, tbl := openWithLedger(t, a, k)
		job := "takeover-" + t.Name()
		opts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithClaim()}

		// a failed run records its error, truncated and cleaned
		long := "bad \xff byte and a NUL \x00: " + strings.Repeat("é", 3000)
		boom := errors.New(long)
		err := r.RunOnce(ctx, job, testdb.Slot(0), func(txn) error { return boom }, append(opts, ormlock.WithOwner("one"))...)
		if err != boom {
			t.Fatalf("err = %v, want fn's error unchanged", err)
		}
		rs := runsOf(t, r, tbl, job)
		if len(rs) != 1 || rs[0].Status != "failed" || rs[0].Owner != "one" || rs[0].Finished.IsZero() {
			t.Fatalf("ledger after failure: %+v", rs)
		}
		if e := rs[0].Error; len(e) > 4000 || !strings.HasSuffix(e, "…[truncated]") || !strings.HasPrefix(e, "bad \uFFFD byte and a NUL : éé") {
			t.Fatalf("error text (%d bytes) %.60q...%q not cleaned and truncated", len(e), e, e[max(0, len(e)-20):])
		}
		// a retry by another instance takes the failed row over
		if err := r.RunOnce(ctx, job, testdb.Slot(0), func(txn) error { return nil }, append(opts, ormlock.WithOwner("two"))...); err != nil {
			t.Fatalf("retry: %v", err)
		}
		rs = runsOf(t, r, tbl, job)
		if len(rs) != 1 || rs[0].Status != "done" || rs[0].Owner != "two" || rs[0].Error != "" {
			t.Fatalf("ledger after retry: %+v, want done by two, error cleared", rs)
		}

		// a row left running by an owner that died is taken over, in either
		// mode, since the taker holds the lock
		for i, mode := range []ormlock.Option{ormlock.WithClaim(), nil} {
			slot := testdb.Slot(10 + i)
			q := "INSERT INTO " + tbl + " (job, slot, status, owner, started_at) VALUES ($1, $2, 'running', 'dead/1', '2001-01-01 00:00:00')"
			args := []any{job, slot}
			if k.Dialect() == "mysql" {
				q = strings.NewReplacer("$1", "?", "$2", "?").Replace(q)
				args = []any{job, slot.Format("2006-01-02 15:04:05")}
			}
			if _, err := testdb.AdminDB(t, k).Exec(q, args...); err != nil {
				t.Fatal(err)
			}
			if err := r.RunOnce(ctx, job, slot, func(txn) error { return nil }, ormlock.WithLedgerTable(tbl), ormlock.WithOwner("three"), mode); err != nil {
				t.Fatalf("take over a dead owner's row: %v", err)
			}
		}
		for _, run := range runsOf(t, r, tbl, job)[:2] {
			if run.Status != "done" || run.Owner != "three" || run.Started.Year() < 2020 {
				t.Fatalf("dead owner's row not taken over: %+v", run)
			}
		}
	})
}

// Losing the lock in claim mode fails the run with ErrLockLost, recorded in
// the ledger, and the next trigger takes the failed row over. Outside a
// transaction (gormlock) fn's context ends with the loss as its cause; in
// one (entlock) fn's transaction is gone with the lock, and rolled back.
func TestRunOnceClaimLockLost(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r, tbl := openWithLedger(t, a, k)
		owner := enttest.Owner(t, k)
		job := "lost-" + t.Name()
		slot := testdb.Slot(5)
		opts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithClaim(), ormlock.WithKeepalive(100 * time.Millisecond)}
		var sawCause atomic.Value
		var killed int64
		start := time.Now()
		err := r.RunOnce(ctx, job, slot, func(tx txn) error {
			if claimInTx(a) {
				if err := tx.Insert(owner, 1); err != nil {
					return err
				}
			}
			h, err := r.Holder(ctx, ormlock.RunKey(job, slot))
			if err != nil || !h.Held {
				return fmt.Errorf("holder: %v %v", h, err)
			}
			killed = h.PID
			testdb.Kill(t, k, h.PID)
			if !claimInTx(a) {
				fctx := tx.Context()
				select {
				case <-fctx.Done():
					sawCause.Store(context.Cause(fctx))
					return fctx.Err()
				case <-time.After(30 * time.Second):
					return errors.New("lock loss never reported")
				}
			}
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if _, err := queryInt(tx, "SELECT 1"); err != nil {
					return err // the transaction is gone with the lock
				}
			}
			return errors.New("fn's transaction survived the lock for 30s")
		}, opts...)
		t.Logf("killed %d; RunOnce returned after %v: %v", killed, time.Since(start).Round(time.Millisecond), err)
		if !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("err = %v, want ErrLockLost", err)
		}
		if c, _ := sawCause.Load().(error); !claimInTx(a) && !errors.Is(c, ormlock.ErrLockLost) {
			t.Fatalf("fn's context cause = %v, want ErrLockLost", c)
		}
		if n := enttest.Count(t, k, owner); n != 0 {
			t.Fatalf("work rows = %d: fn's transaction committed after the lock was lost", n)
		}
		rs := runsOf(t, r, tbl, job)
		if len(rs) != 1 || rs[0].Status != "failed" || !strings.Contains(rs[0].Error, "lock lost") {
			t.Fatalf("ledger after the loss: %+v, want failed with the loss", rs)
		}
		// the next trigger takes the failed row over
		if err := r.RunOnce(ctx, job, slot, func(tx txn) error { return tx.Insert(owner, 2) }, opts...); err != nil {
			t.Fatalf("retry: %v", err)
		}
		if rs := runsOf(t, r, tbl, job); len(rs) != 1 || rs[0].Status != "done" || rs[0].Error != "" {
			t.Fatalf("ledger after retry: %+v", rs)
		}
		if n := enttest.Count(t, k, owner); n != 1 {
			t.Fatalf("work rows after retry = %d, want 1", n)
		}
	})
}

// RunOnce's edge cases on every adapter: panics, contexts, bad input, the
// adapter's default options, the MySQL driver's found-rows mode, a
// REPEATABLE READ waiter, namespaces. Claim mode is above, old ledgers
// ledger_test.go.

func TestRunOncePanic(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r, tbl := openWithLedger(t, a, k)
		owner := enttest.Owner(t, k)
		job := "panic-" + t.Name()
		for _, claim := range []bool{false, true} {
			opts := []ormlock.Option{ormlock.WithLedgerTable(tbl)}
			slot := testdb.Slot(0)
			if claim {
				opts = append(opts, ormlock.WithClaim())
				slot = testdb.Slot(1)
			}
			var got any
			func() {
				defer func() { got = recover() }()
				_ = r.RunOnce(ctx, job, slot, func(tx txn) error {
					if err := tx.Insert(owner, 7); err != nil {
						return err
					}
					panic("kaboom")
				}, opts...)
			}()
			if got != "kaboom" {
				t.Fatalf("claim=%v: recovered %v, want the original panic value", claim, got)
			}
			if !free(t, k, keys.NameValue(keys.RunKey(job, slot))) {
				t.Fatalf("claim=%v: lock still held after panic", claim)
			}
		}
		rs := runsOf(t, r, tbl, job)
		// transactional: rolled back, no row; claim: the row says failed
		if len(rs) != 1 || !rs[0].Slot.Equal(testdb.Slot(1)) || rs[0].Status != "failed" || rs[0].Error != "panic: kaboom" {
			t.Fatalf("ledger after panics: %+v, want only the claim-mode row, failed with the panic", rs)
		}
		// claim mode's fn wrote outside any transaction (gormlock), or in
		// its own transaction, rolled back too (entlock)
		want := 1
		if claimInTx(a) {
			want = 0
		}
		if n := enttest.Count(t, k, owner); n != want {
			t.Fatalf("work rows = %d, want %d", n, want)
		}
		for _, s := range []time.Time{testdb.Slot(0), testdb.Slot(1)} {
			if err := r.RunOnce(ctx, job, s, func(txn) error { return nil }, ormlock.WithLedgerTable(tbl)); err != nil {
				t.Fatalf("retry after panic: %v", err)
			}
		}
	})
}

func TestRunOnceContext(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r, tbl := openWithLedger(t, a, k)
		owner := enttest.Owner(t, k)
		job := "ctx-" + t.Name()
		opt := ormlock.WithLedgerTable(tbl)

		// an already cancelled context: fn is not called, nothing is
		// written, and the error matches both ErrNotAcquired and the
		// context's error
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		called := false
		for _, claim := range []ormlock.Option{nil, ormlock.WithClaim()} {
			err := r.RunOnce(ctx, job, testdb.Slot(0), func(txn) error { called = true; return nil }, opt, claim)
			if !errors.Is(err, context.Canceled) || !errors.Is(err, ormlock.ErrNotAcquired) || called {
				t.Fatalf("claim=%v: cancelled context: err=%v called=%v, want ErrNotAcquired and context.Canceled", claim != nil, err, called)
			}
		}

		// cancelled while fn runs: the transaction cannot commit, no row
		ctx, cancel = context.WithCancel(context.Background())
		err := r.RunOnce(ctx, job, testdb.Slot(0), func(tx txn) error {
			cancel()
			return tx.Insert(owner, 1)
		}, opt)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("fn's statement after cancel: %v, want context.Canceled", err)
		}
		if rs := runsOf(t, r, tbl, job); len(rs) != 0 {
			t.Fatalf("ledger after a cancelled run: %+v", rs)
		}
		if n := enttest.Count(t, k, owner); n != 0 {
			t.Fatalf("work rows = %d", n)
		}
		if err := r.RunOnce(context.Background(), job, testdb.Slot(0), func(txn) error { return nil }, opt); err != nil {
			t.Fatalf("later run: %v", err)
		}
	})
}

// Bad input every adapter can get; the adapters test their own (a nil
// handle, a nil context).
func TestRunOnceBadInput(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			ctx := context.Background()
			r := openRunner(t, a, testdb.Postgres)
			called := false
			fn := func(txn) error { called = true; return nil }
			slot := testdb.Slot(0)
			runsErr := func(_ []ormlock.Run, err error) error { return err }
			var heard atomic.Int32
			watch := ormlock.WithObserver(ormlock.ObserverFunc(func(context.Context, ormlock.Event) { heard.Add(1) }))
			cases := []struct {
				name string
				err  error
				want string
			}{
				{"nil fn", r.RunOnce(ctx, "j", slot, nil), "nil fn"},
				{"empty job", r.RunOnce(ctx, "", slot, fn), "empty job name"},
				{"long job", r.RunOnce(ctx, strings.Repeat("j", 192), slot, fn), "at most 191"},
				{"bad UTF-8 job", r.RunOnce(ctx, "j\xff", slot, fn), "not valid UTF-8"},
				{"NUL job", r.RunOnce(ctx, "j\x00", slot, fn), "NUL"},
				{"zero slot", r.RunOnce(ctx, "j", time.Time{}, fn), "zero slot"},
				{"ancient slot", r.RunOnce(ctx, "j", time.Date(999, 1, 1, 0, 0, 0, 0, time.UTC), fn), "outside years"},
				// a trigger's wall clock, not a scheduled time: refused before
				// anything is locked (the observer hears nothing) or written
				{"sub-second slot", r.RunOnce(ctx, "j", slot.Add(time.Millisecond), fn, watch), "schedule.Slot(t)"},
				{"sub-second slot, claim", r.RunOnce(ctx, "j", slot.Add(time.Microsecond), fn, watch, ormlock.WithClaim()), "RunScheduled"},
				{"bad owner", r.RunOnce(ctx, "j", slot, fn, ormlock.WithOwner(strings.Repeat("o", 256))), "WithOwner"},
				{"bad wait", r.RunOnce(ctx, "j", slot, fn, ormlock.WithWait(-1)), "WithWait"},
				{"Runs limit 0", runsErr(r.Runs(ctx, "j", 0)), "limit"},
				{"Runs empty job", runsErr(r.Runs(ctx, "", 1)), "empty job name"},
			}
			for _, c := range cases {
				if !errors.Is(c.err, ormlock.ErrInvalidArgument) || !strings.Contains(c.err.Error(), c.want) || !strings.HasPrefix(c.err.Error(), "ormlock: ") {
					t.Errorf("%s: %v, want ErrInvalidArgument mentioning %q", c.name, c.err, c.want)
				}
			}
			if called {
				t.Error("fn called on bad input")
			}
			if n := heard.Load(); n != 0 {
				t.Errorf("a refused slot reached the lock: %d events", n)
			}
		})
	}
}

// The adapter's default options (GORM's plugin, entlock.Wrap) apply to
// RunOnce: the run lock is the namespaced RunKey, and the observer hears
// the namespace, the verb and the key.
func TestRunOnceObserverAndNamespace(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		var mu sync.Mutex
		var events []ormlock.Event
		obs := ormlock.ObserverFunc(func(_ context.Context, e ormlock.Event) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, e)
		})
		tbl := ledgerTable(t, k, openRunner(t, a, k))
		r := a.with(t, k, ormlock.WithNamespace("billing"), ormlock.WithObserver(obs), ormlock.WithLedgerTable(tbl))
		job := "observed-" + t.Name()
		name := keys.NameValue(keys.RunKey(job, testdb.Slot(0)))
		err := r.RunOnce(ctx, job, testdb.Slot(0), func(txn) error {
			if !free(t, k, name) || testdb.RawFree(t, k, "billing", name) {
				return errors.New("the run lock is not the namespaced RunKey")
			}
			if h, err := r.Holder(ctx, ormlock.RunKey(job, testdb.Slot(0))); err != nil || !h.Held {
				return fmt.Errorf("namespaced RunKey not held: %v %v", h, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.RunOnce(ctx, job, testdb.Slot(0), func(txn) error { return nil }); !errors.Is(err, ormlock.ErrAlreadyDone) {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		var kinds []string
		for _, e := range events {
			if e.Verb != "RunOnce" || e.Namespace != "billing" || keys.NameValue(keys.Key(e.Key)) != name {
				t.Errorf("event %+v", e)
			}
			kinds = append(kinds, e.Kind.String())
		}
		got := strings.Join(kinds, ",")
		if want := "attempt,acquired,released,attempt,acquired,already_done,released"; got != want {
			t.Errorf("events %s, want %s", got, want)
		}
	})
}

// With the MySQL driver's clientFoundRows=true, ON DUPLICATE KEY UPDATE
// reports 1 for a row left as it was; the claim reads the row back, so a
// done slot is still seen as done.
func TestRunOnceMySQLClientFoundRows(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			k := testdb.MariaDB
			dsn := testdb.DSN(t, k)
			dsn = strings.Replace(dsn, "parseTime=true&loc=UTC", "clientFoundRows=true&interpolateParams=true", 1)
			if !strings.Contains(dsn, "clientFoundRows=true") {
				t.Fatalf("unexpected DSN shape %q", dsn)
			}
			sqlDB, err := sql.Open("mysql", dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sqlDB.Close() })
			t.Cleanup(func() { testdb.AssertNoLeaks(t, k, sqlDB) })
			r := a.on(t, k.Dialect(), sqlDB)
			tbl := ledgerTable(t, k, r)
			job := "foundrows-" + t.Name()
			for i, mode := range []ormlock.Option{nil, ormlock.WithClaim()} {
				calls := 0
				for range 3 {
					err := r.RunOnce(context.Background(), job, testdb.Slot(i), func(txn) error { calls++; return nil }, ormlock.WithLedgerTable(tbl), mode)
					if err != nil && !errors.Is(err, ormlock.ErrAlreadyDone) {
						t.Fatal(err)
					}
				}
				if calls != 1 {
					t.Fatalf("mode %d: fn ran %d times with clientFoundRows=true, want 1", i, calls)
				}
			}
			if rs := runsOf(t, r, tbl, job); len(rs) != 2 || rs[0].Status != "done" || rs[1].Status != "done" {
				t.Fatalf("ledger: %+v", rs)
			}
		})
	}
}

// PostgreSQL REPEATABLE READ: a waiter's snapshot is taken after the lock is
// granted, so it sees the winner's commit and the slot done (it was a
// serialization failure when the snapshot predated the wait).
func TestRunOnceRepeatableReadWaiter(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			k := testdb.Postgres
			ctx := context.Background()
			r1, r2 := openRunner(t, a, k), openRunner(t, a, k)
			tbl := ledgerTable(t, k, r1)
			job := "rr-" + t.Name()
			in := make(chan struct{})
			res := make(chan error, 1)
			go func() {
				res <- r1.RunOnce(ctx, job, testdb.Slot(0), func(txn) error {
					close(in)
					time.Sleep(300 * time.Millisecond)
					return nil
				}, ormlock.WithLedgerTable(tbl))
			}()
			<-in
			rr := ormlock.WithTxOptions(&sql.TxOptions{Isolation: sql.LevelRepeatableRead})
			called := false
			fn := func(txn) error { called = true; return nil }
			err := r2.RunOnce(ctx, job, testdb.Slot(0), fn, ormlock.WithLedgerTable(tbl), ormlock.WithWait(20*time.Second), rr)
			if werr := <-res; werr != nil {
				t.Fatalf("winner: %v", werr)
			}
			if !errors.Is(err, ormlock.ErrAlreadyDone) || called {
				t.Fatalf("waiter: err=%v called=%v, want ErrAlreadyDone", err, called)
			}
			if err := r2.RunOnce(ctx, job, testdb.Slot(0), fn, ormlock.WithLedgerTable(tbl), rr); !errors.Is(err, ormlock.ErrAlreadyDone) || called {
				t.Fatalf("call again: %v", err)
			}
		})
	}
}

// The detector of TestConformanceRunOnceExactlyOncePerSlot and
// TestConformanceMigrateConcurrent works: a plain duplicate INSERT does show
// up in the server log.
func TestRunOnceDuplicateKeyDetector(t *testing.T) {
	k := testdb.Postgres
	r := openRunner(t, adapters[0], k)
	tbl := ledgerTable(t, k, r)
	off := testdb.LogOffset(t, k)
	if off < 0 {
		t.Skip("no server log (DSN override)")
	}
	ctx := context.Background()
	job := "dup-" + t.Name()
	if err := r.RunOnce(ctx, job, testdb.Slot(0), func(txn) error { return nil }, ormlock.WithLedgerTable(tbl)); err != nil {
		t.Fatal(err)
	}
	if err := r.RunOnce(ctx, job, testdb.Slot(0), func(txn) error { return nil }, ormlock.WithLedgerTable(tbl)); !errors.Is(err, ormlock.ErrAlreadyDone) {
		t.Fatalf("second run: %v", err)
	}
	testdb.AssertNoDuplicateKeyLogged(t, k, off)
	_, err := testdb.AdminDB(t, k).Exec("INSERT INTO "+tbl+" (job, slot, status, owner, started_at) VALUES ($1, $2, 'done', 'x', now())", job, testdb.Slot(0))
	if err == nil {
		t.Fatal("plain duplicate INSERT succeeded")
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(testdb.LogLines(t, k, off, "duplicate key")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a real duplicate-key error never reached the server log: the detector is blind")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRunOnceNamespacesSeparateRuns: two services sharing a database and the
// default-shaped ledger table, one with namespace "billing", one with
// "reports", run the same job for the same slot. Each runs its own job: in
// transactional mode neither gets ErrAlreadyDone; in claim mode both run at
// once and neither takes over the other's row (no ErrLockLost). Runs shows
// each service its own row with its namespace.
func TestRunOnceNamespacesSeparateRuns(t *testing.T) {
	for _, mode := range []struct {
		name  string
		extra []ormlock.Option
	}{{"transactional", nil}, {"claim", []ormlock.Option{ormlock.WithClaim()}}} {
		t.Run(mode.name, func(t *testing.T) {
			forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
				ctx := context.Background()
				plain := openRunner(t, a, k)
				tbl := ledgerTable(t, k, plain)
				services := map[string]runner{}
				for _, ns := range []string{"billing", "reports"} {
					services[ns] = a.with(t, k, ormlock.WithNamespace(ns), ormlock.WithLedgerTable(tbl), ormlock.WithKeepalive(200*time.Millisecond))
				}
				const job = "nightly-cleanup"
				slot := testdb.Slot(1)

				// the first service is inside fn when the second one runs
				inside, leave := make(chan struct{}), make(chan struct{})
				var first error
				var wg sync.WaitGroup
				wg.Go(func() {
					first = services["billing"].RunOnce(ctx, job, slot, func(txn) error {
						close(inside)
						<-leave
						return nil
					}, mode.extra...)
				})
				select {
				case <-inside:
				case <-time.After(30 * time.Second):
					t.Fatal("billing's run never started")
				}
				ran := false
				second := services["reports"].RunOnce(ctx, job, slot, func(txn) error { ran = true; return nil }, mode.extra...)
				close(leave)
				wg.Wait()
				if first != nil || second != nil || !ran {
					t.Fatalf("billing: %v; reports: %v (fn ran %v); want both to run", first, second, ran)
				}

				// each namespace now has its slot done, and only its own
				for ns, r := range services {
					err := r.RunOnce(ctx, job, slot, func(txn) error { return nil }, mode.extra...)
					if !errors.Is(err, ormlock.ErrAlreadyDone) {
						t.Errorf("%s again: %v, want ErrAlreadyDone", ns, err)
					}
					rs, err := r.Runs(ctx, job, 10)
					if err != nil || len(rs) != 1 || rs[0].Namespace != ns || rs[0].Status != "done" || !rs[0].Slot.Equal(slot) {
						t.Errorf("%s: Runs = %+v, %v; want one done run in its namespace", ns, rs, err)
					}
				}
				// no namespace: a third job of its own, not run yet
				if rs := runsOf(t, plain, tbl, job); len(rs) != 0 {
					t.Errorf("Runs without a namespace = %+v, want none", rs)
				}
				if err := plain.RunOnce(ctx, job, slot, func(txn) error { return nil }, append(mode.extra, ormlock.WithLedgerTable(tbl))...); err != nil {
					t.Errorf("no namespace: %v", err)
				}
			})
		})
	}
}

// WithTxOptions applies to claim mode's own transaction, on the adapters
// that run a claim-mode fn in one (entlock, sqllock, pgxlock): fn's insert
// in a read-only transaction fails, and the run is failed with no work.
func TestRunOnceClaimTxOptions(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		if !claimInTx(a) {
			t.Skip("claim mode runs fn outside any transaction")
		}
		ctx := context.Background()
		r, tbl := openWithLedger(t, a, k)
		owner := enttest.Owner(t, k)
		job := "txopts-" + t.Name()
		ro := ormlock.WithTxOptions(&sql.TxOptions{ReadOnly: true})
		err := r.RunOnce(ctx, job, testdb.Slot(0), func(tx txn) error {
			return tx.Insert(owner, 1)
		}, ormlock.WithLedgerTable(tbl), ormlock.WithClaim(), ro)
		if err == nil {
			t.Fatal("insert in a read-only claim-mode transaction succeeded")
		}
		t.Logf("read-only: %v", err)
		if rs := runsOf(t, r, tbl, job); len(rs) != 1 || rs[0].Status != "failed" {
			t.Fatalf("ledger: %+v, want failed", rs)
		}
		if n := enttest.Count(t, k, owner); n != 0 {
			t.Fatalf("work rows = %d", n)
		}
	})
}
