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

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
)

// RunOnce's edge cases on every adapter: panics, contexts, bad input, the
// adapter's default options, the MySQL driver's found-rows mode, a
// REPEATABLE READ waiter, namespaces. Claim mode is runonce_test.go, old
// ledgers ledger_test.go.

func TestRunOncePanic(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r := openRunner(t, a, k)
		tbl := ledgerTable(t, k, r)
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
		r := openRunner(t, a, k)
		tbl := ledgerTable(t, k, r)
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
		r := openRunner(t, a, k)
		tbl := ledgerTable(t, k, r)
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
