package entlock_test

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
	_ "time/tzdata" // zone data for the DST tests, whatever the machine has

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/enttest"
	"github.com/ormlock/ormlock/internal/enttest/ent"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
)

// ledgerName is a per-test table name with prefix.
func ledgerName(t *testing.T, prefix string) string {
	t.Helper()
	return fmt.Sprintf("%s_%016x", prefix, uint64(keyhash.Int64(t.Name())))
}

// ledgerTable creates the test's own ledger table with entlock.Migrate on x
// and drops it after the test.
func ledgerTable[T entlock.TxLike](t *testing.T, k testdb.Kind, x interface {
	Tx(context.Context) (T, error)
}) string {
	t.Helper()
	name := ledgerName(t, "e")
	t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + name) })
	if err := entlock.Migrate(context.Background(), x, ormlock.WithLedgerTable(name)); err != nil {
		t.Fatalf("Migrate(%s): %v", name, err)
	}
	return name
}

// slotAt returns a distinct, deterministic slot per index.
func slotAt(i int) time.Time {
	return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Hour)
}

// runs reads the ledger of job through entlock.Runs.
func runs(t *testing.T, client *ent.Client, tbl, job string) []ormlock.Run {
	t.Helper()
	rs, err := entlock.Runs(context.Background(), client, job, 1000, ormlock.WithLedgerTable(tbl))
	if err != nil {
		t.Fatalf("Runs: %v", err)
	}
	return rs
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

// contend runs RunOnce from three clients (three pools: three instances) for
// each of slots slots, the instances of a slot released together, and checks
// that exactly one run per slot committed.
func contend(t *testing.T, k testdb.Kind, slots int, extra ...ormlock.Option) {
	const instances = 3
	ctx := context.Background()
	clients := make([]*ent.Client, instances)
	for i := range clients {
		clients[i], _ = openEnt(t, k)
	}
	tbl := ledgerTable(t, k, clients[0])
	owner := enttest.Owner(t, k)
	job := "once-" + t.Name()
	claim := config.New(extra...).Claim

	insideBySlot := make([]atomic.Int64, slots)
	calls := make([]atomic.Int64, slots)
	var maxInside, notAcquired, alreadyDone atomic.Int64
	start := time.Now()
	for s := range slots {
		slot := slotAt(s)
		barrier := make(chan struct{})
		errs := make([]error, instances)
		var wg sync.WaitGroup
		for i, client := range clients {
			opts := append([]ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithOwner(fmt.Sprintf("instance-%d", i))}, extra...)
			if s%2 == 1 {
				// half the slots wait for the lock: the losers then find the
				// slot done
				opts = append(opts, ormlock.WithWait(20*time.Second))
			}
			wg.Go(func() {
				<-barrier
				errs[i] = entlock.RunOnce(ctx, client, job, slot, func(tx *ent.Tx) error {
					maxOf(&maxInside, insideBySlot[s].Add(1))
					defer insideBySlot[s].Add(-1)
					calls[s].Add(1)
					time.Sleep(2 * time.Millisecond)
					return insert(ctx, tx, owner, s)
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

	if got := maxInside.Load(); got != 1 {
		t.Fatalf("max fn calls inside one slot at once = %d, want 1", got)
	}
	for s := range slots {
		if n := calls[s].Load(); n != 1 {
			t.Fatalf("slot %d: fn called %d times, want 1", s, n)
		}
	}
	if n := count(t, k, owner); n != slots {
		t.Fatalf("committed work rows = %d, want %d", n, slots)
	}
	rs := runs(t, clients[2], tbl, job)
	if len(rs) != slots {
		t.Fatalf("ledger rows = %d, want %d", len(rs), slots)
	}
	for _, r := range rs {
		if r.Status != ormlock.RunDone || r.Finished.IsZero() || r.Error != "" || !strings.HasPrefix(r.Owner, "instance-") {
			t.Fatalf("ledger row %+v, want done by an instance", r)
		}
	}
	if alreadyDone.Load() == 0 {
		t.Errorf("no ErrAlreadyDone seen: the waiting losers did not exercise the ledger")
	}
	t.Logf("claim=%v: %d slots x %d instances in %v: %d ErrNotAcquired, %d ErrAlreadyDone",
		claim, slots, instances, elapsed.Round(time.Millisecond), notAcquired.Load(), alreadyDone.Load())
}

func TestRunOnceExactlyOncePerSlot(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) { contend(t, k, 50) })
}

func TestRunOnceClaimExactlyOncePerSlot(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) { contend(t, k, 20, ormlock.WithClaim()) })
}

func TestRunOnceFailedFnRetries(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		client, _ := openEnt(t, k)
		tbl := ledgerTable(t, k, client)
		owner := enttest.Owner(t, k)
		job := "retry-" + t.Name()
		opt := ormlock.WithLedgerTable(tbl)
		boom := errors.New("boom")
		err := entlock.RunOnce(ctx, client, job, slotAt(1), func(tx *ent.Tx) error {
			if err := insert(ctx, tx, owner, 1); err != nil {
				return err
			}
			return boom
		}, opt)
		if err != boom {
			t.Fatalf("err = %v, want fn's error unchanged", err)
		}
		if rs := runs(t, client, tbl, job); len(rs) != 0 {
			t.Fatalf("ledger after a failed run: %+v, want no row", rs)
		}
		if n := count(t, k, owner); n != 0 {
			t.Fatalf("work rows after a failed run = %d, want 0", n)
		}
		if !rawFree(t, k, keys.NameValue(keys.RunKey(job, slotAt(1)))) {
			t.Fatal("lock still held after a failed run")
		}
		// a later trigger retries
		if err := entlock.RunOnce(ctx, client, job, slotAt(1), func(tx *ent.Tx) error {
			return insert(ctx, tx, owner, 1)
		}, opt); err != nil {
			t.Fatalf("retry: %v", err)
		}
		rs := runs(t, client, tbl, job)
		if len(rs) != 1 || rs[0].Status != ormlock.RunDone || !rs[0].Slot.Equal(slotAt(1)) || rs[0].Job != job {
			t.Fatalf("ledger after retry: %+v", rs)
		}
		if n := count(t, k, owner); n != 1 {
			t.Fatalf("work rows after retry = %d, want 1", n)
		}
		// already done, in either mode
		for _, mode := range []ormlock.Option{nil, ormlock.WithClaim()} {
			called := false
			err = entlock.RunOnce(ctx, client, job, slotAt(1), func(*ent.Tx) error { called = true; return nil }, opt, mode)
			if !errors.Is(err, ormlock.ErrAlreadyDone) || !errors.Is(err, entlock.ErrAlreadyDone) || called {
				t.Fatalf("claim=%v: again: err=%v called=%v, want ErrAlreadyDone without calling fn", mode != nil, err, called)
			}
			if !strings.HasPrefix(err.Error(), "ormlock: ") || !strings.Contains(err.Error(), job) {
				t.Errorf("error text %q lacks the ormlock: prefix or the job", err)
			}
		}
		if !rawFree(t, k, keys.NameValue(keys.RunKey(job, slotAt(1)))) {
			t.Fatal("lock still held after ErrAlreadyDone")
		}
	})
}

func TestRunOncePanic(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		client, _ := openEnt(t, k)
		tbl := ledgerTable(t, k, client)
		owner := enttest.Owner(t, k)
		job := "panic-" + t.Name()
		for _, claim := range []bool{false, true} {
			opts := []ormlock.Option{ormlock.WithLedgerTable(tbl)}
			slot := slotAt(0)
			if claim {
				opts = append(opts, ormlock.WithClaim())
				slot = slotAt(1)
			}
			var got any
			func() {
				defer func() { got = recover() }()
				_ = entlock.RunOnce(ctx, client, job, slot, func(tx *ent.Tx) error {
					if err := insert(ctx, tx, owner, 7); err != nil {
						return err
					}
					panic("kaboom")
				}, opts...)
			}()
			if got != "kaboom" {
				t.Fatalf("claim=%v: recovered %v, want the original panic value", claim, got)
			}
			if !rawFree(t, k, keys.NameValue(keys.RunKey(job, slot))) {
				t.Fatalf("claim=%v: lock still held after panic", claim)
			}
		}
		rs := runs(t, client, tbl, job)
		// transactional: rolled back, no row; claim: the row says failed
		if len(rs) != 1 || !rs[0].Slot.Equal(slotAt(1)) || rs[0].Status != ormlock.RunFailed || rs[0].Error != "panic: kaboom" {
			t.Fatalf("ledger after panics: %+v, want only the claim-mode row, failed with the panic", rs)
		}
		// claim mode's fn wrote in its own transaction, rolled back too
		if n := count(t, k, owner); n != 0 {
			t.Fatalf("work rows = %d, want 0", n)
		}
		for _, s := range []time.Time{slotAt(0), slotAt(1)} {
			if err := entlock.RunOnce(ctx, client, job, s, func(*ent.Tx) error { return nil }, ormlock.WithLedgerTable(tbl)); err != nil {
				t.Fatalf("retry after panic: %v", err)
			}
		}
	})
}

func TestRunOnceContext(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		client, _ := openEnt(t, k)
		tbl := ledgerTable(t, k, client)
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
			err := entlock.RunOnce(ctx, client, job, slotAt(0), func(*ent.Tx) error { called = true; return nil }, opt, claim)
			if !errors.Is(err, context.Canceled) || !errors.Is(err, ormlock.ErrNotAcquired) || called {
				t.Fatalf("claim=%v: cancelled context: err=%v called=%v, want ErrNotAcquired and context.Canceled", claim != nil, err, called)
			}
		}

		// cancelled while fn runs: the transaction cannot commit, no row
		ctx, cancel = context.WithCancel(context.Background())
		err := entlock.RunOnce(ctx, client, job, slotAt(0), func(tx *ent.Tx) error {
			cancel()
			return insert(ctx, tx, owner, 1)
		}, opt)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("fn's statement after cancel: %v, want context.Canceled", err)
		}
		if rs := runs(t, client, tbl, job); len(rs) != 0 {
			t.Fatalf("ledger after a cancelled run: %+v", rs)
		}
		if n := count(t, k, owner); n != 0 {
			t.Fatalf("work rows = %d", n)
		}
		if err := entlock.RunOnce(context.Background(), client, job, slotAt(0), func(*ent.Tx) error { return nil }, opt); err != nil {
			t.Fatalf("later run: %v", err)
		}
	})
}

func TestRunOnceClaim(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		client1, _ := openEnt(t, k)
		client2, _ := openEnt(t, k)
		tbl := ledgerTable(t, k, client1)
		owner := enttest.Owner(t, k)
		job := "claim-" + t.Name()
		slot := slotAt(3)
		opts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithClaim()}

		inFn, proceed := make(chan struct{}), make(chan struct{})
		result := make(chan error, 1)
		var atCommit []ormlock.Run
		var atCommitErr error
		go func() {
			result <- entlock.RunOnce(ctx, client1, job, slot, func(tx *ent.Tx) error {
				if err := insert(ctx, tx, owner, 1); err != nil {
					return err
				}
				// fn's transaction commits before the row is marked done
				tx.OnCommit(func(next ent.Committer) ent.Committer {
					return ent.CommitFunc(func(ctx context.Context, tx *ent.Tx) error {
						err := next.Commit(ctx, tx)
						atCommit, atCommitErr = entlock.Runs(ctx, client2, job, 5, ormlock.WithLedgerTable(tbl))
						return err
					})
				})
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
		// while fn runs: the running row is visible from another pool; fn's
		// own write is not, it is in fn's transaction
		rs := runs(t, client2, tbl, job)
		if len(rs) != 1 || rs[0].Status != ormlock.RunRunning || rs[0].Owner != "one" || !rs[0].Finished.IsZero() || rs[0].Started.IsZero() {
			fail("ledger during the run: %+v, want one running row owned by one", rs)
		}
		if n := count(t, k, owner); n != 0 {
			fail("fn's write visible during the run (%d rows): fn's tx is not a transaction", n)
		}
		// the lock is held by the session connection, which Holder names
		h, err := entlock.Holder(ctx, client2, keys.RunKey(job, slot))
		if err != nil || !h.Held || h.PID == 0 {
			fail("Holder of the running slot: %v %v", h, err)
		}
		t.Logf("claim-mode holder: %s", h)
		// a second instance, in either mode, is turned away
		for _, mode := range []ormlock.Option{ormlock.WithClaim(), nil} {
			err := entlock.RunOnce(ctx, client2, job, slot, func(*ent.Tx) error { return errors.New("must not run") },
				ormlock.WithLedgerTable(tbl), ormlock.WithOwner("two"), mode)
			if !errors.Is(err, ormlock.ErrNotAcquired) {
				fail("second instance during the run: %v, want ErrNotAcquired", err)
			}
		}
		close(proceed)
		if err := <-result; err != nil {
			t.Fatalf("claim run: %v", err)
		}
		if atCommitErr != nil || len(atCommit) != 1 || atCommit[0].Status != ormlock.RunRunning {
			t.Fatalf("ledger right after fn's commit: %+v %v, want still running", atCommit, atCommitErr)
		}
		rs = runs(t, client2, tbl, job)
		if len(rs) != 1 || rs[0].Status != ormlock.RunDone || rs[0].Owner != "one" || rs[0].Finished.Before(rs[0].Started) || rs[0].Duration < 0 {
			t.Fatalf("ledger after the run: %+v, want done", rs)
		}
		if n := count(t, k, owner); n != 1 {
			t.Fatalf("work rows after the run = %d, want 1", n)
		}
		for _, mode := range []ormlock.Option{ormlock.WithClaim(), nil} {
			err := entlock.RunOnce(ctx, client2, job, slot, func(*ent.Tx) error { return errors.New("must not run") }, ormlock.WithLedgerTable(tbl), mode)
			if !errors.Is(err, ormlock.ErrAlreadyDone) {
				t.Fatalf("after the run: %v, want ErrAlreadyDone", err)
			}
		}
		t.Logf("run took %v by the server's clock", rs[0].Duration)
	})
}

// Claim mode's transaction begins at fn's first statement on it: a job that
// works through the client (or not on the database at all) holds only the
// lock's connection, so a pool of two serves it.
func TestRunOnceClaimLazyTx(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		client, db := openEnt(t, k)
		tbl := ledgerTable(t, k, client)
		db.SetMaxOpenConns(2)
		owner := enttest.Owner(t, k)
		job := "lazy-" + t.Name()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		opts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithClaim()}
		err := entlock.RunOnce(ctx, client, job, slotAt(0), func(*ent.Tx) error {
			for i := range 3 { // each statement commits on its own
				if err := client.Item.Create().SetOwner(owner).SetN(i).Exec(ctx); err != nil {
					return err
				}
			}
			if n := count(t, k, owner); n != 3 {
				return fmt.Errorf("client writes not committed as they went: %d rows", n)
			}
			return nil
		}, opts...)
		if err != nil {
			t.Fatalf("claim run through the client on a pool of 2: %v", err)
		}
		// fn's tx on the same pool of two
		err = entlock.RunOnce(ctx, client, job, slotAt(1), func(tx *ent.Tx) error {
			return insert(ctx, tx, owner, 10)
		}, opts...)
		if err != nil {
			t.Fatalf("claim run through tx on a pool of 2: %v", err)
		}
		if n := count(t, k, owner); n != 4 {
			t.Fatalf("work rows = %d, want 4", n)
		}
		if rs := runs(t, client, tbl, job); len(rs) != 2 || rs[0].Status != ormlock.RunDone || rs[1].Status != ormlock.RunDone {
			t.Fatalf("ledger: %+v", rs)
		}
	})
}

// Losing the lock in claim mode rolls fn's transaction back: no work from a
// run whose slot another instance may take over.
func TestRunOnceClaimLockLost(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		client, _ := openEnt(t, k)
		tbl := ledgerTable(t, k, client)
		owner := enttest.Owner(t, k)
		job := "lost-" + t.Name()
		slot := slotAt(0)
		opts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithClaim(), ormlock.WithKeepalive(100 * time.Millisecond)}
		var killed int64
		start := time.Now()
		err := entlock.RunOnce(ctx, client, job, slot, func(tx *ent.Tx) error {
			if err := insert(ctx, tx, owner, 1); err != nil {
				return err
			}
			h, err := entlock.Holder(ctx, client, keys.RunKey(job, slot))
			if err != nil || !h.Held {
				return fmt.Errorf("holder: %v %v", h, err)
			}
			killed = h.PID
			kill(t, k, h.PID)
			deadline := time.Now().Add(30 * time.Second)
			for time.Now().Before(deadline) {
				if _, err := tx.Item.Query().Count(ctx); err != nil {
					return err // the transaction is gone with the lock
				}
				time.Sleep(20 * time.Millisecond)
			}
			return errors.New("fn's transaction survived the lock for 30s")
		}, opts...)
		t.Logf("killed %d; RunOnce returned after %v: %v", killed, time.Since(start).Round(time.Millisecond), err)
		if !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("err = %v, want ErrLockLost", err)
		}
		if n := count(t, k, owner); n != 0 {
			t.Fatalf("work rows = %d: fn's transaction committed after the lock was lost", n)
		}
		rs := runs(t, client, tbl, job)
		if len(rs) != 1 || rs[0].Status != ormlock.RunFailed || !strings.Contains(rs[0].Error, "lock lost") {
			t.Fatalf("ledger after the loss: %+v, want failed with the loss", rs)
		}
		// the next trigger takes the failed row over
		if err := entlock.RunOnce(ctx, client, job, slot, func(tx *ent.Tx) error { return insert(ctx, tx, owner, 2) }, opts...); err != nil {
			t.Fatalf("retry: %v", err)
		}
		if rs := runs(t, client, tbl, job); len(rs) != 1 || rs[0].Status != ormlock.RunDone || rs[0].Error != "" {
			t.Fatalf("ledger after retry: %+v", rs)
		}
		if n := count(t, k, owner); n != 1 {
			t.Fatalf("work rows after retry = %d, want 1", n)
		}
	})
}

// kill ends the server connection id from an admin connection.
func kill(t *testing.T, k testdb.Kind, id int64) {
	t.Helper()
	admin := testdb.AdminDB(t, k)
	var err error
	if k.Dialect() == "postgres" {
		var ok bool
		if err = admin.QueryRow("SELECT pg_terminate_backend($1)", id).Scan(&ok); err == nil && !ok {
			err = errors.New("pg_terminate_backend returned false")
		}
	} else {
		_, err = admin.Exec(fmt.Sprintf("KILL CONNECTION %d", id))
	}
	if err != nil {
		t.Errorf("kill %d: %v", id, err)
	}
}

// WithTxOptions applies to claim mode's own transaction.
func TestRunOnceClaimTxOptions(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		client, _ := openEnt(t, k)
		tbl := ledgerTable(t, k, client)
		owner := enttest.Owner(t, k)
		job := "txopts-" + t.Name()
		ro := ormlock.WithTxOptions(&sql.TxOptions{ReadOnly: true})
		err := entlock.RunOnce(ctx, client, job, slotAt(0), func(tx *ent.Tx) error {
			return insert(ctx, tx, owner, 1)
		}, ormlock.WithLedgerTable(tbl), ormlock.WithClaim(), ro)
		if err == nil {
			t.Fatal("insert in a read-only claim-mode transaction succeeded")
		}
		t.Logf("read-only: %v", err)
		if rs := runs(t, client, tbl, job); len(rs) != 1 || rs[0].Status != ormlock.RunFailed {
			t.Fatalf("ledger: %+v, want failed", rs)
		}
		if n := count(t, k, owner); n != 0 {
			t.Fatalf("work rows = %d", n)
		}
	})
}

// The *Driver can stand in for the client: fn then gets ent's dialect.Tx.
func TestRunOnceOnDriver(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		drv, client, _ := openDriver(t, k)
		tbl := ledgerTable(t, k, drv)
		owner := enttest.Owner(t, k)
		job := "driver-" + t.Name()
		q := "INSERT INTO items (owner, n) VALUES ($1, $2)"
		if k.Dialect() == "mysql" {
			q = "INSERT INTO items (owner, n) VALUES (?, ?)"
		}
		for i, mode := range []ormlock.Option{nil, ormlock.WithClaim()} {
			err := entlock.RunOnce(ctx, drv, job, slotAt(i), func(tx dialect.Tx) error {
				if rawFree(t, k, keys.NameValue(keys.RunKey(job, slotAt(i)))) {
					return errors.New("lock not held")
				}
				return tx.Exec(ctx, q, []any{owner, i}, nil)
			}, ormlock.WithLedgerTable(tbl), mode)
			if err != nil {
				t.Fatalf("claim=%v: %v", mode != nil, err)
			}
		}
		if n := count(t, k, owner); n != 2 {
			t.Fatalf("work rows = %d, want 2", n)
		}
		rs, err := entlock.Runs(ctx, drv, job, 5, ormlock.WithLedgerTable(tbl))
		if err != nil || len(rs) != 2 {
			t.Fatalf("Runs on the driver: %+v %v", rs, err)
		}
		if rs2 := runs(t, client, tbl, job); len(rs2) != 2 || !rs2[0].Slot.Equal(rs[0].Slot) {
			t.Fatalf("Runs on the client: %+v", rs2)
		}
	})
}

func TestMigrate(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		drv, client, _ := openDriver(t, k)
		name := ledgerName(t, "m")
		t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + name) })
		// replicas starting together: concurrent and repeated Migrate calls,
		// on clients and on the driver
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			other, _ := openEnt(t, k)
			wg.Go(func() { errs[i] = entlock.Migrate(ctx, other, ormlock.WithLedgerTable(name)) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("concurrent Migrate %d: %v", i, err)
			}
		}
		if err := entlock.Migrate(ctx, client, ormlock.WithLedgerTable(name)); err != nil {
			t.Fatalf("Migrate again: %v", err)
		}
		if err := entlock.Migrate(ctx, drv, ormlock.WithLedgerTable(name)); err != nil {
			t.Fatalf("Migrate on the driver: %v", err)
		}
		if !tableExists(t, k, name) {
			t.Fatalf("table %s not created", name)
		}
		if !rawFree(t, k, "ormlock.migrate:"+name) {
			t.Fatal("Migrate's lock still held")
		}

		// a ledger table given to Wrap applies to Migrate, RunOnce and Runs
		pname := ledgerName(t, "p")
		t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + pname) })
		pclient, _ := openEnt(t, k, ormlock.WithLedgerTable(pname))
		if err := entlock.Migrate(ctx, pclient); err != nil {
			t.Fatal(err)
		}
		job := "wrapdefault-" + t.Name()
		if err := entlock.RunOnce(ctx, pclient, job, slotAt(0), func(*ent.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if rs, err := entlock.Runs(ctx, pclient, job, 5); err != nil || len(rs) != 1 {
			t.Fatalf("Runs via Wrap's table: %v %v", rs, err)
		}
		if rs := runs(t, client, pname, job); len(rs) != 1 {
			t.Fatalf("row not in Wrap's table: %v", rs)
		}
	})
}

func tableExists(t *testing.T, k testdb.Kind, name string) bool {
	t.Helper()
	var n int
	q := "SELECT count(*) FROM information_schema.tables WHERE table_name = $1"
	if k.Dialect() == "mysql" {
		q = "SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?"
	}
	if err := testdb.AdminDB(t, k).QueryRow(q, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

func TestLedgerBadTableNames(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		// a pool that is already closed: any statement would fail with
		// "sql: database is closed", so ErrInvalidArgument proves that
		// nothing was sent
		closed := testdb.Open(t, k)
		closed.Close()
		client := ent.NewClient(ent.Driver(entlock.Wrap(entsql.OpenDB(k.Dialect(), closed))))
		fn := func(*ent.Tx) error { return errors.New("fn called") }
		for _, name := range []string{"runs; DROP TABLE x", "", strings.Repeat("a", 64), "1runs", "a-b", `r"s`, "r`s", "schema.runs", "ré"} {
			opt := ormlock.WithLedgerTable(name)
			if err := entlock.Migrate(ctx, client, opt); !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "table name") {
				t.Errorf("Migrate(%q): %v, want ErrInvalidArgument naming the table", name, err)
			}
			for _, mode := range []ormlock.Option{nil, ormlock.WithClaim()} {
				if err := entlock.RunOnce(ctx, client, "j", slotAt(0), fn, opt, mode); !errors.Is(err, ormlock.ErrInvalidArgument) {
					t.Errorf("RunOnce with table %q: %v", name, err)
				}
			}
			if _, err := entlock.Runs(ctx, client, "j", 1, opt); !errors.Is(err, ormlock.ErrInvalidArgument) {
				t.Errorf("Runs with table %q: %v", name, err)
			}
		}
		// as a Wrap default, reported by Err and by every verb
		bad := entlock.Wrap(entsql.OpenDB(k.Dialect(), closed), ormlock.WithLedgerTable("a-b"))
		if err := bad.Err(); !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "table name") {
			t.Errorf("Wrap with a bad table: Err() = %v", err)
		}
		if err := entlock.Migrate(ctx, bad); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Errorf("Migrate on a Wrap with a bad table: %v", err)
		}
		// a missing table is reported with a hint
		live, _ := openEnt(t, k)
		for _, mode := range []ormlock.Option{nil, ormlock.WithClaim()} {
			err := entlock.RunOnce(ctx, live, "j-"+t.Name(), slotAt(0), fn, ormlock.WithLedgerTable("no_such_ledger"), mode)
			if err == nil || !strings.Contains(err.Error(), "create it with Migrate") {
				t.Errorf("missing table: %v", err)
			}
		}
		if _, err := entlock.Runs(ctx, live, "j", 1, ormlock.WithLedgerTable("no_such_ledger")); err == nil || !strings.Contains(err.Error(), "create it with Migrate") {
			t.Errorf("Runs on a missing table: %v", err)
		}
	})
}

func TestRuns(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		client, _ := openEnt(t, k)
		tbl := ledgerTable(t, k, client)
		job := "audit-" + t.Name()
		opt := ormlock.WithLedgerTable(tbl)
		berlin, err := time.LoadLocation("Europe/Berlin")
		if err != nil {
			t.Skip(err)
		}
		// slots given in Berlin time, with nanoseconds: stored as the UTC
		// instant, truncated to microseconds; run out of order
		slot := func(day int) time.Time { return time.Date(2031, 3, day, 0, 0, 0, 123456789, berlin) }
		if err := entlock.RunOnce(ctx, client, job, slot(3), func(*ent.Tx) error { time.Sleep(20 * time.Millisecond); return nil }, opt, ormlock.WithClaim(), ormlock.WithOwner("c")); err != nil {
			t.Fatal(err)
		}
		if err := entlock.RunOnce(ctx, client, job, slot(1), func(*ent.Tx) error { return nil }, opt, ormlock.WithOwner("a")); err != nil {
			t.Fatal(err)
		}
		if err := entlock.RunOnce(ctx, client, job, slot(2), func(*ent.Tx) error { return errors.New("disk full") }, opt, ormlock.WithClaim(), ormlock.WithOwner("b")); err == nil {
			t.Fatal("want fn's error")
		}
		// another job's run is not listed
		if err := entlock.RunOnce(ctx, client, job+"-other", slot(4), func(*ent.Tx) error { return nil }, opt); err != nil {
			t.Fatal(err)
		}
		rs, err := entlock.Runs(ctx, client, job, 10, opt)
		if err != nil {
			t.Fatal(err)
		}
		want := []struct {
			day    int
			status ormlock.RunStatus
			owner  string
			err    string
		}{{3, ormlock.RunDone, "c", ""}, {2, ormlock.RunFailed, "b", "disk full"}, {1, ormlock.RunDone, "a", ""}}
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
		t.Logf("durations: %v %v %v", rs[0].Duration, rs[1].Duration, rs[2].Duration)
		if rs, err := entlock.Runs(ctx, client, job, 2, opt); err != nil || len(rs) != 2 || !rs[1].Slot.Equal(keys.NormalizeSlot(slot(2))) {
			t.Fatalf("Runs limit 2 = %+v, %v", rs, err)
		}
		if rs, err := entlock.Runs(ctx, client, "never-ran", 5, opt); err != nil || len(rs) != 0 {
			t.Fatalf("Runs of an unknown job = %+v, %v", rs, err)
		}
	})
}

func TestRunOnceBadInput(t *testing.T) {
	ctx := context.Background()
	var nilCtx context.Context
	client, _ := openEnt(t, testdb.Postgres)
	called := false
	fn := func(*ent.Tx) error { called = true; return nil }
	slot := slotAt(0)
	runsErr := func(_ []ormlock.Run, err error) error { return err }
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"nil ctx", entlock.RunOnce(nilCtx, client, "j", slot, fn), "nil context"},
		{"nil client", entlock.RunOnce(ctx, (*ent.Client)(nil), "j", slot, fn), "nil client"},
		{"nil fn", entlock.RunOnce(ctx, client, "j", slot, (func(*ent.Tx) error)(nil)), "nil fn"},
		{"empty job", entlock.RunOnce(ctx, client, "", slot, fn), "empty job name"},
		{"long job", entlock.RunOnce(ctx, client, strings.Repeat("j", 192), slot, fn), "at most 191"},
		{"bad UTF-8 job", entlock.RunOnce(ctx, client, "j\xff", slot, fn), "not valid UTF-8"},
		{"NUL job", entlock.RunOnce(ctx, client, "j\x00", slot, fn), "NUL"},
		{"zero slot", entlock.RunOnce(ctx, client, "j", time.Time{}, fn), "zero slot"},
		{"ancient slot", entlock.RunOnce(ctx, client, "j", time.Date(999, 1, 1, 0, 0, 0, 0, time.UTC), fn), "outside years"},
		{"bad owner", entlock.RunOnce(ctx, client, "j", slot, fn, ormlock.WithOwner(strings.Repeat("o", 256))), "WithOwner"},
		{"bad wait", entlock.RunOnce(ctx, client, "j", slot, fn, ormlock.WithWait(-1)), "WithWait"},
		{"Migrate nil ctx", entlock.Migrate(nilCtx, client), "nil context"},
		{"Migrate nil client", entlock.Migrate(ctx, (*ent.Client)(nil)), "nil client"},
		{"Migrate nil driver", entlock.Migrate(ctx, (*entlock.Driver)(nil)), "nil client"},
		{"Runs nil ctx", runsErr(entlock.Runs(nilCtx, client, "j", 1)), "nil context"},
		{"Runs nil client", runsErr(entlock.Runs(ctx, (*ent.Client)(nil), "j", 1)), "nil client"},
		{"Runs limit 0", runsErr(entlock.Runs(ctx, client, "j", 0)), "limit"},
		{"Runs empty job", runsErr(entlock.Runs(ctx, client, "", 1)), "empty job name"},
	}
	for _, c := range cases {
		if !errors.Is(c.err, ormlock.ErrInvalidArgument) || !strings.Contains(c.err.Error(), c.want) || !strings.HasPrefix(c.err.Error(), "ormlock: ") {
			t.Errorf("%s: %v, want ErrInvalidArgument mentioning %q", c.name, c.err, c.want)
		}
	}
	if called {
		t.Error("fn called on bad input")
	}
}

func TestRunOnceNotWrapped(t *testing.T) {
	ctx := context.Background()
	plain, _ := openPlain(t, testdb.Postgres)
	called := false
	for _, mode := range []ormlock.Option{nil, ormlock.WithClaim()} {
		err := entlock.RunOnce(ctx, plain, "j-"+t.Name(), slotAt(0), func(*ent.Tx) error { called = true; return nil }, mode)
		if !errors.Is(err, entlock.ErrNotWrapped) || called {
			t.Fatalf("claim=%v: err=%v called=%v, want ErrNotWrapped", mode != nil, err, called)
		}
	}
	if err := entlock.Migrate(ctx, plain); !errors.Is(err, entlock.ErrNotWrapped) {
		t.Errorf("Migrate: %v", err)
	}
	if _, err := entlock.Runs(ctx, plain, "j", 1); !errors.Is(err, entlock.ErrNotWrapped) {
		t.Errorf("Runs: %v", err)
	}
	if _, err := entlock.Holder(ctx, plain, "j"); !errors.Is(err, entlock.ErrNotWrapped) {
		t.Errorf("Holder: %v", err)
	}
}

// ent has no nested transactions: a transactional client is refused.
func TestRunOnceOnTransactionalClient(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		client, _ := openEnt(t, k)
		tbl := ledgerTable(t, k, client)
		job := "nested-" + t.Name()
		err := entlock.Transaction(ctx, client, "outer-"+t.Name(), func(tx *ent.Tx) error {
			for _, mode := range []ormlock.Option{nil, ormlock.WithClaim()} {
				err := entlock.RunOnce(ctx, tx.Client(), job, slotAt(0), func(*ent.Tx) error { return errors.New("fn called") }, ormlock.WithLedgerTable(tbl), mode)
				if !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "within a transaction") {
					return fmt.Errorf("claim=%v: RunOnce on tx.Client(): %v", mode != nil, err)
				}
			}
			// the plain client runs it in a transaction of its own
			return entlock.RunOnce(ctx, client, job, slotAt(0), func(*ent.Tx) error { return nil }, ormlock.WithLedgerTable(tbl))
		})
		if err != nil {
			t.Fatal(err)
		}
		if rs := runs(t, client, tbl, job); len(rs) != 1 {
			t.Fatalf("ledger: %+v", rs)
		}
	})
}

func TestRunOnceObserverAndNamespace(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		var mu sync.Mutex
		var events []ormlock.Event
		obs := ormlock.ObserverFunc(func(_ context.Context, e ormlock.Event) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, e)
		})
		setup, _ := openEnt(t, k)
		tbl := ledgerTable(t, k, setup)
		client, _ := openEnt(t, k, ormlock.WithNamespace("billing"), ormlock.WithObserver(obs), ormlock.WithLedgerTable(tbl))
		job := "observed-" + t.Name()
		name := keys.NameValue(keys.RunKey(job, slotAt(0)))
		err := entlock.RunOnce(ctx, client, job, slotAt(0), func(*ent.Tx) error {
			if !rawFree(t, k, name) {
				return errors.New("the run lock is the RunKey without the namespace")
			}
			if h, err := entlock.Holder(ctx, client, keys.RunKey(job, slotAt(0))); err != nil || !h.Held {
				return fmt.Errorf("namespaced RunKey not held: %v %v", h, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := entlock.RunOnce(ctx, client, job, slotAt(0), func(*ent.Tx) error { return nil }); !errors.Is(err, ormlock.ErrAlreadyDone) {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		var kinds []string
		for _, e := range events {
			if e.Verb != "RunOnce" || e.Namespace != "billing" || keys.NameValue(e.Key) != name {
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
