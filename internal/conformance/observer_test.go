package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
)

// The events of Transaction and Session, field by field, on every adapter
// and server: TestConformanceEvents checks their order per verb; these
// check what each event carries, in every outcome.

func obsKinds(es []ormlock.Event) []ormlock.EventKind {
	out := make([]ormlock.EventKind, len(es))
	for i, e := range es {
		out[i] = e.Kind
	}
	return out
}

// obsExpect checks that r saw exactly the events kinds, in order, all for
// verb on key in namespace ns on k's dialect, and returns them. Wait and
// Held must never be negative, and are zero on the events that do not
// carry them.
func obsExpect(t *testing.T, r *testdb.Recorder, k testdb.Kind, verb string, key ormlock.Key, ns string, kinds ...ormlock.EventKind) []ormlock.Event {
	t.Helper()
	es := r.Events()
	if fmt.Sprint(obsKinds(es)) != fmt.Sprint(kinds) {
		t.Fatalf("events %v, want %v", obsKinds(es), kinds)
	}
	for _, e := range es {
		if e.Verb != verb || e.Dialect != k.Dialect() || e.Key != key || e.Namespace != ns {
			t.Errorf("%v event: verb=%q dialect=%q key=%v ns=%q, want %q %q %v %q", e.Kind, e.Verb, e.Dialect, e.Key, e.Namespace, verb, k.Dialect(), key, ns)
		}
		if e.Wait < 0 || e.Held < 0 {
			t.Errorf("%v event: negative wait %v or held %v", e.Kind, e.Wait, e.Held)
		}
		switch e.Kind {
		case ormlock.EventAcquired, ormlock.EventNotAcquired:
			if e.Held != 0 {
				t.Errorf("%v event carries held %v", e.Kind, e.Held)
			}
			if e.Wait > time.Hour {
				t.Errorf("%v event: wait %v, measured from no attempt", e.Kind, e.Wait)
			}
		case ormlock.EventReleased, ormlock.EventReleaseFailed, ormlock.EventLockLost:
			if e.Wait != 0 {
				t.Errorf("%v event carries wait %v", e.Kind, e.Wait)
			}
		default:
			if e.Wait != 0 || e.Held != 0 {
				t.Errorf("%v event carries wait %v / held %v", e.Kind, e.Wait, e.Held)
			}
		}
		switch e.Kind {
		case ormlock.EventReleaseFailed, ormlock.EventLockLost:
			if e.Err == nil {
				t.Errorf("%v event without an error", e.Kind)
			}
		case ormlock.EventNotAcquired:
		default:
			if e.Err != nil {
				t.Errorf("%v event with error %v", e.Kind, e.Err)
			}
		}
	}
	return es
}

const (
	evAttempt       = ormlock.EventAttempt
	evAcquired      = ormlock.EventAcquired
	evNotAcquired   = ormlock.EventNotAcquired
	evReleased      = ormlock.EventReleased
	evReleaseFailed = ormlock.EventReleaseFailed
	evLockLost      = ormlock.EventLockLost
)

func TestObserverTransaction(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		ctx := context.Background()
		rec := &testdb.Recorder{}
		obs := ormlock.WithObserver(rec)
		fnCalled := func(txn) error { return errors.New("fn called") }

		t.Run("acquired and released", func(t *testing.T) {
			rec.Reset()
			key := "obs-ok-" + t.Name()
			var fnTook time.Duration
			err := r.Transaction(ctx, key, func(tx txn) error {
				start := time.Now()
				if got := obsKinds(rec.Events()); fmt.Sprint(got) != fmt.Sprint([]ormlock.EventKind{evAttempt, evAcquired}) {
					return fmt.Errorf("events inside fn: %v, want attempt, acquired", got)
				}
				err := tx.Exec("SELECT 1")
				time.Sleep(20 * time.Millisecond) // a hold to measure, not an order
				fnTook = time.Since(start)
				return err
			}, obs)
			if err != nil {
				t.Fatal(err)
			}
			es := obsExpect(t, rec, k, "Transaction", ormlock.Name(key), "", evAttempt, evAcquired, evReleased)
			// the hold spans fn: acquired before fn started, released after
			// it returned (both measured on the monotonic clock)
			if es[2].Held < fnTook {
				t.Errorf("held %v shorter than fn's own %v", es[2].Held, fnTook)
			}
		})

		t.Run("not acquired", func(t *testing.T) {
			rec.Reset()
			key := "obs-held-" + t.Name()
			defer testdb.RawHold(t, k, "", key)()
			err := r.Transaction(ctx, key, fnCalled, obs)
			if !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Fatalf("err = %v, want ErrNotAcquired", err)
			}
			es := obsExpect(t, rec, k, "Transaction", ormlock.Name(key), "", evAttempt, evNotAcquired)
			if es[1].Err != nil {
				t.Errorf("not_acquired (held elsewhere) carries err %v", es[1].Err)
			}

			rec.Reset()
			err = r.Transaction(ctx, key, fnCalled, obs, ormlock.WithWait(150*time.Millisecond))
			if !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Fatalf("wait: err = %v, want ErrNotAcquired", err)
			}
			es = obsExpect(t, rec, k, "Transaction", ormlock.Name(key), "", evAttempt, evNotAcquired)
			if es[1].Err != nil {
				t.Errorf("not_acquired (wait ran out) carries err %v", es[1].Err)
			}

			rec.Reset()
			dctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
			defer cancel()
			err = r.Transaction(dctx, key, fnCalled, obs, ormlock.WithWait(time.Minute))
			if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("deadline: err = %v", err)
			}
			es = obsExpect(t, rec, k, "Transaction", ormlock.Name(key), "", evAttempt, evNotAcquired)
			if !errors.Is(es[1].Err, context.DeadlineExceeded) {
				t.Errorf("not_acquired at the context deadline carries err %v, want DeadlineExceeded", es[1].Err)
			}
		})

		t.Run("fn error", func(t *testing.T) {
			rec.Reset()
			key := "obs-fnerr-" + t.Name()
			boom := errors.New("boom")
			if err := r.Transaction(ctx, key, func(txn) error { return boom }, obs); err != boom {
				t.Fatalf("err = %v, want fn's", err)
			}
			obsExpect(t, rec, k, "Transaction", ormlock.Name(key), "", evAttempt, evAcquired, evReleased)
		})

		t.Run("panic", func(t *testing.T) {
			rec.Reset()
			key := "obs-panic-" + t.Name()
			var got any
			func() {
				defer func() { got = recover() }()
				_ = r.Transaction(ctx, key, func(txn) error { panic("kaboom") }, obs)
			}()
			if got != "kaboom" {
				t.Fatalf("recovered %v", got)
			}
			obsExpect(t, rec, k, "Transaction", ormlock.Name(key), "", evAttempt, evAcquired, evReleased)
			if !free(t, k, key) {
				t.Fatal("lock held after panic")
			}
		})

		t.Run("namespace and key forms", func(t *testing.T) {
			rec.Reset()
			id := keyhash.Int64("obs-id-" + t.Name())
			if err := r.Transaction(ctx, id, func(txn) error { return nil }, obs, ormlock.WithNamespace("obsns")); err != nil {
				t.Fatal(err)
			}
			obsExpect(t, rec, k, "Transaction", ormlock.ID(id), "obsns", evAttempt, evAcquired, evReleased)
		})

		t.Run("database unreachable", func(t *testing.T) {
			// a pool that cannot hand out a connection: the verb fails
			// before the lock call, and the observer still hears of it
			if a.name == "pgxlock" {
				t.Skip("pgxlock opens a pool of its own from the pool's DSN: a closed *sql.DB does not reach it")
			}
			closed := testdb.Open(t, k)
			cr := a.on(t, k.Dialect(), closed)
			closed.Close()
			_ = cr.Pool().Close() // the runner's own pool, when it opened one on closed's connector
			rec.Reset()
			key := "obs-closed-" + t.Name()
			if err := cr.Transaction(ctx, key, fnCalled, obs); err == nil {
				t.Fatal("no error on a closed pool")
			}
			es := obsExpect(t, rec, k, "Transaction", ormlock.Name(key), "", evAttempt, evNotAcquired)
			if es[1].Err == nil {
				t.Errorf("not_acquired carries err %v, want the pool's error", es[1].Err)
			}
		})

		t.Run("context already ended", func(t *testing.T) {
			// the transaction cannot even begin: still a not_acquired, and
			// the error matches both ErrNotAcquired and the context's
			rec.Reset()
			key := "obs-cancelled-" + t.Name()
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			err := r.Transaction(cctx, key, fnCalled, obs)
			if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want ErrNotAcquired and context.Canceled", err)
			}
			es := obsExpect(t, rec, k, "Transaction", ormlock.Name(key), "", evAttempt, evNotAcquired)
			if !errors.Is(es[1].Err, context.Canceled) {
				t.Errorf("not_acquired carries err %v, want context.Canceled", es[1].Err)
			}
		})

		t.Run("no observer", func(t *testing.T) {
			rec.Reset()
			if err := r.Transaction(ctx, "obs-none-"+t.Name(), func(txn) error { return nil }); err != nil {
				t.Fatal(err)
			}
			if es := rec.Events(); len(es) != 0 {
				t.Fatalf("events without an observer: %v", obsKinds(es))
			}
		})
	})
}

// Many goroutines share one observer: every attempt ends in exactly one
// not_acquired or one acquired, and every acquired in exactly one released.
func TestObserverTransactionContention(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		const workers, rounds = 4, 15
		rec := &testdb.Recorder{}
		ls := make([]locker, workers)
		for i := range ls {
			ls[i] = a.open(t, k)
		}
		key := "obs-contention-" + t.Name()
		var mu sync.Mutex
		wins, losses := 0, 0
		for range rounds {
			var wg sync.WaitGroup
			for _, l := range ls {
				wg.Go(func() {
					err := l.Transaction(context.Background(), key, func(tx txn) error {
						time.Sleep(2 * time.Millisecond) // a hold to contend for, not an order
						return tx.Exec("SELECT 1")
					}, ormlock.WithObserver(rec))
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						wins++
					case errors.Is(err, ormlock.ErrNotAcquired):
						losses++
					default:
						t.Errorf("unexpected error: %v", err)
					}
				})
			}
			wg.Wait()
		}
		att, acq, rel, na := rec.Count(evAttempt), rec.Count(evAcquired), rec.Count(evReleased), rec.Count(evNotAcquired)
		if att != workers*rounds || acq != wins || rel != wins || na != losses {
			t.Fatalf("events do not match outcomes: attempt=%d acquired=%d released=%d not_acquired=%d, wins=%d losses=%d",
				att, acq, rel, na, wins, losses)
		}
		if len(rec.Events()) != att+acq+rel+na {
			t.Fatalf("unexpected event kinds: %v", obsKinds(rec.Events()))
		}
	})
}

// MySQL/MariaDB: a lock released behind ormlock's back makes its
// RELEASE_LOCK return NULL, reported as release_failed with an error
// wrapping lockproto.ErrNotHeld.
func TestObserverReleaseFailureMariaDB(t *testing.T) {
	k := testdb.MariaDB
	for _, a := range adapters {
		if a.name == "pgxlock" {
			continue // PostgreSQL only
		}
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			r := openRunner(t, a, k)
			rec := &testdb.Recorder{}
			key := "obs-relfail-" + t.Name()
			err := r.Transaction(context.Background(), key, func(tx txn) error {
				return tx.Exec("DO RELEASE_LOCK(?)", keyhash.MySQLName("", key))
			}, ormlock.WithObserver(rec))
			if err != nil {
				t.Fatal(err)
			}
			es := obsExpect(t, rec, k, "Transaction", ormlock.Name(key), "", evAttempt, evAcquired, evReleaseFailed)
			if !errors.Is(es[2].Err, lockproto.ErrNotHeld) {
				t.Errorf("release_failed err = %v, want one wrapping lockproto.ErrNotHeld", es[2].Err)
			}
		})
	}
}

// Session's events, field by field (the Session tests check Session
// itself).
func TestObserverSession(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		ctx := context.Background()
		rec := &testdb.Recorder{}
		obs := ormlock.WithObserver(rec)

		t.Run("acquired and released", func(t *testing.T) {
			rec.Reset()
			key := "obs-sess-" + t.Name()
			err := r.Session(ctx, key, func(ctx context.Context) error {
				if got := obsKinds(rec.Events()); fmt.Sprint(got) != fmt.Sprint([]ormlock.EventKind{evAttempt, evAcquired}) {
					return fmt.Errorf("events inside fn: %v", got)
				}
				_, err := r.Pool().ExecContext(ctx, "SELECT 1")
				return err
			}, obs)
			if err != nil {
				t.Fatal(err)
			}
			obsExpect(t, rec, k, "Session", ormlock.Name(key), "", evAttempt, evAcquired, evReleased)
		})

		t.Run("fn error", func(t *testing.T) {
			rec.Reset()
			key := "obs-sess-err-" + t.Name()
			boom := errors.New("boom")
			if err := r.Session(ctx, key, func(context.Context) error { return boom }, obs); !errors.Is(err, boom) {
				t.Fatalf("err = %v", err)
			}
			obsExpect(t, rec, k, "Session", ormlock.Name(key), "", evAttempt, evAcquired, evReleased)
		})

		t.Run("not acquired", func(t *testing.T) {
			rec.Reset()
			key := "obs-sess-held-" + t.Name()
			defer testdb.RawHold(t, k, "", key)()
			err := r.Session(ctx, key, func(context.Context) error { return errors.New("fn called") }, obs)
			if !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Fatalf("err = %v", err)
			}
			obsExpect(t, rec, k, "Session", ormlock.Name(key), "", evAttempt, evNotAcquired)
		})

		t.Run("lock lost", func(t *testing.T) {
			rec.Reset()
			key := "obs-sess-lost-" + t.Name()
			err := r.Session(ctx, key, func(ctx context.Context) error {
				id, err := lockHolder(ctx, r, key)
				if err != nil {
					return err
				}
				testdb.Kill(t, k, id)
				return awaitLoss(ctx)
			}, obs, ormlock.WithKeepalive(100*time.Millisecond))
			if !errors.Is(err, ormlock.ErrLockLost) {
				t.Fatalf("err = %v, want ErrLockLost", err)
			}
			obsExpect(t, rec, k, "Session", ormlock.Name(key), "", evAttempt, evAcquired, evLockLost)
		})

		t.Run("loss seen at release", func(t *testing.T) {
			// the keepalive never runs; the release finds the connection
			// gone and reports release_failed
			rec.Reset()
			key := "obs-sess-relfail-" + t.Name()
			err := r.Session(ctx, key, func(ctx context.Context) error {
				return killHolder(ctx, t, k, r, key)
			}, obs, ormlock.WithKeepalive(time.Hour))
			if !errors.Is(err, ormlock.ErrLockLost) {
				t.Fatalf("err = %v, want ErrLockLost", err)
			}
			obsExpect(t, rec, k, "Session", ormlock.Name(key), "", evAttempt, evAcquired, evReleaseFailed)
		})
	})
}

// Every verb reports the same events in the same order on every adapter.
func TestConformanceEvents(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r := openRunner(t, a, k)
		rec := &testdb.Recorder{}
		obs := ormlock.WithObserver(rec)
		key := "conf-events-" + t.Name()
		want := func(what, kinds string) {
			t.Helper()
			if got := rec.Take(); got != kinds {
				t.Fatalf("%s: events %s, want %s", what, got, kinds)
			}
		}
		_ = r.Transaction(ctx, key, func(txn) error { return nil }, obs)
		want("Transaction", "attempt,acquired,released")
		_ = r.Transaction(ctx, key, func(txn) error { return errors.New("x") }, obs)
		want("Transaction, fn error", "attempt,acquired,released")
		func() {
			defer func() { _ = recover() }()
			_ = r.Transaction(ctx, key, func(txn) error { panic("p") }, obs)
		}()
		want("Transaction, panic", "attempt,acquired,released")
		_ = r.Session(ctx, key, func(context.Context) error { return nil }, obs)
		want("Session", "attempt,acquired,released")

		tbl := ledgerTable(t, k, r)
		job := "events-" + t.Name()
		for range 2 {
			_ = r.RunOnce(ctx, job, testdb.Slot(0), func(txn) error { return nil }, obs, ormlock.WithLedgerTable(tbl))
		}
		want("RunOnce twice", "attempt,acquired,released,attempt,acquired,already_done,released")

		release := testdb.RawHold(t, k, "", key)
		defer release()
		if err := r.Transaction(ctx, key, func(txn) error { return nil }, obs); !errors.Is(err, ormlock.ErrNotAcquired) {
			t.Fatalf("held elsewhere: %v", err)
		}
		want("Transaction, held", "attempt,not_acquired")
		_ = r.Session(ctx, key, func(context.Context) error { return nil }, obs)
		want("Session, held", "attempt,not_acquired")
	})
}

// An observer that panics, on any event, of any verb, on any server, costs
// neither the lock nor its connection nor the process: the verb ends as it
// would have with a quiet observer, the lock is free afterwards, no
// connection is in use, and the panic is reported once on slog.Default. A
// panic on lock_lost, which runs on the Session's keepalive goroutine, would
// otherwise end the test binary.
func TestObserverPanicContained(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			observerPanicSuite(t, func(t *testing.T, k testdb.Kind) (*sql.DB, panicProvoke) {
				r, tbl := openWithLedger(t, a, k)
				return r.Pool(), func(t *testing.T, verb string, ev ormlock.EventKind, obs ormlock.Observer) error {
					return provoke(t, k, r, verb, ev, obs, tbl)
				}
			})
		})
	}
}

// provoke calls verb with obs so that event ev happens, and returns the
// verb's error; a release failure on a dedicated connection is a loss found
// at release, so its ErrLockLost is dropped here.
func provoke(t *testing.T, k testdb.Kind, r runner, verb string, ev ormlock.EventKind, obs ormlock.Observer, tbl string) error {
	t.Helper()
	ctx := context.Background()
	name := "opanic-" + t.Name()
	job, slot := name, testdb.Slot(int(ev))
	key := ormlock.Name(name)
	if strings.HasPrefix(verb, "RunOnce") {
		key = ormlock.RunKey(job, slot)
	}
	var claim []ormlock.Option
	if verb == "RunOnce claim" {
		claim = []ormlock.Option{ormlock.WithClaim()}
	}
	opts := append([]ormlock.Option{ormlock.WithObserver(obs), ormlock.WithLedgerTable(tbl)}, claim...)
	switch ev {
	case ormlock.EventNotAcquired:
		defer testdb.RawHold(t, k, "", key.String())()
	case ormlock.EventLockLost:
		opts = append(opts, ormlock.WithKeepalive(100*time.Millisecond))
	case ormlock.EventReleaseFailed:
		opts = append(opts, ormlock.WithKeepalive(time.Hour))
	case ormlock.EventAlreadyDone:
		first := append([]ormlock.Option{ormlock.WithLedgerTable(tbl)}, claim...)
		if err := r.RunOnce(ctx, job, slot, func(txn) error { return nil }, first...); err != nil {
			t.Fatalf("first run: %v", err)
		}
	}

	// body is fn's work: nothing, or what makes the lock fail or get lost
	body := func(ctx context.Context, tx txn) error {
		switch {
		case ev == ormlock.EventReleaseFailed && tx != nil && verb != "RunOnce claim":
			// the lock released behind ormlock's back: RELEASE_LOCK fails
			return tx.Exec("DO RELEASE_LOCK(?)", keyhash.MySQLName("", key.String()))
		case ev == ormlock.EventReleaseFailed, ev == ormlock.EventLockLost:
			h, err := r.Holder(ctx, key)
			if err != nil || !h.Held {
				return fmt.Errorf("holder: %v %v", h, err)
			}
			testdb.Kill(t, k, h.PID)
			if ev == ormlock.EventReleaseFailed { // no keepalive check: the release finds it
				testdb.WaitGone(t, k, h.PID)
				return nil
			}
			// a Session's ctx ends with the loss; fn's tx of a claim run is
			// bound to the lock's session (gormlock: its context ends;
			// entlock: its statements fail once the loss is seen)
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if err := ctx.Err(); err != nil {
					return err
				}
				if tx != nil {
					if _, err := queryInt(tx, "SELECT 1"); err != nil {
						return err
					}
				}
			}
			return errors.New("loss not seen within 30s")
		}
		return nil
	}
	var err error
	switch verb {
	case "Transaction":
		err = r.Transaction(ctx, key, func(tx txn) error { return body(tx.Context(), tx) }, opts...)
	case "Session":
		err = r.Session(ctx, key, func(ctx context.Context) error { return body(ctx, nil) }, opts...)
	default:
		err = r.RunOnce(ctx, job, slot, func(tx txn) error { return body(tx.Context(), tx) }, opts...)
	}
	if ev == ormlock.EventReleaseFailed && errors.Is(err, ormlock.ErrLockLost) {
		return nil
	}
	return err
}

// panicProvoke makes verb ("Transaction", "Session", "RunOnce" or "RunOnce
// claim") produce event ev with observer obs, and returns the verb's error.
type panicProvoke func(t *testing.T, verb string, ev ormlock.EventKind, obs ormlock.Observer) error

// observerPanicSuite is the observer-panic suite of one adapter: an
// observer that panics, on any event, of any verb, on any server, costs
// neither the lock nor its connection nor the process. The verb ends as it
// would have with a quiet observer, the observer still gets the later
// events, the lock is free afterwards, no connection is in use, and the
// panic is reported once on slog.Default (a panic on lock_lost, which runs
// on the Session's keepalive goroutine, would otherwise end the test
// binary). open returns, for kind k, the pool the adapter uses and its
// Provoke.
func observerPanicSuite(t *testing.T, open func(t *testing.T, k testdb.Kind) (*sql.DB, panicProvoke)) {
	logs := &panicLog{}
	prev := slog.Default()
	slog.SetDefault(slog.New(logs))
	t.Cleanup(func() { slog.SetDefault(prev) })
	verbs := []string{"Transaction", "Session", "RunOnce", "RunOnce claim"}
	events := []ormlock.EventKind{
		ormlock.EventAttempt, ormlock.EventAcquired, ormlock.EventNotAcquired, ormlock.EventReleased,
		ormlock.EventReleaseFailed, ormlock.EventLockLost, ormlock.EventAlreadyDone,
	}
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		sqlDB, provoke := open(t, k)
		for _, verb := range verbs {
			for _, ev := range events {
				if !panicApplies(verb, ev, k) {
					continue
				}
				t.Run(strings.ReplaceAll(verb, " ", "_")+"/"+ev.String(), func(t *testing.T) {
					logs.reports(0)
					obs := &panicky{on: ev}
					err := provoke(t, verb, ev, obs)
					if want := panicOutcome(ev); want == nil && err != nil || want != nil && !errors.Is(err, want) {
						t.Errorf("%s: err = %v, want %v", verb, err, want)
					}
					seen := obs.kinds()
					if !slices.Contains(seen, ev) {
						t.Fatalf("the observer never got %s: %v", ev, seen)
					}
					if last := seen[len(seen)-1]; ev != last && last == ormlock.EventAttempt {
						t.Errorf("no event after the panic on %s: %v", ev, seen)
					}
					if n, odd := logs.reports(ev); n != 1 || len(odd) > 0 {
						t.Errorf("observer panic reported %d times, want once; unexpected reports: %v", n, odd)
					}
					testdb.AssertNoLeaks(t, k, sqlDB)
					if n := sqlDB.Stats().InUse; n != 0 {
						t.Errorf("InUse = %d after the call", n)
					}
				})
			}
		}
	})
}

// panicApplies reports whether verb can produce event ev on kind k: a
// PostgreSQL transaction lock cannot fail its release (COMMIT or ROLLBACK
// releases it), only a dedicated lock connection can be lost while fn runs,
// and only RunOnce finds a slot done.
func panicApplies(verb string, ev ormlock.EventKind, k testdb.Kind) bool {
	dedicated := verb == "Session" || verb == "RunOnce claim"
	switch ev {
	case ormlock.EventReleaseFailed:
		return dedicated || k == testdb.MariaDB
	case ormlock.EventLockLost:
		return dedicated
	case ormlock.EventAlreadyDone:
		return strings.HasPrefix(verb, "RunOnce")
	}
	return true
}

// panicky is an observer that panics on one event kind, as one with a
// metrics label mistake does, and records every event it is given.
type panicky struct {
	on   ormlock.EventKind
	mu   sync.Mutex
	seen []ormlock.EventKind
}

func (p *panicky) Observe(_ context.Context, e ormlock.Event) {
	p.mu.Lock()
	p.seen = append(p.seen, e.Kind)
	p.mu.Unlock()
	if e.Kind == p.on {
		panic(fmt.Sprintf("observer: inconsistent label cardinality on %s", e.Kind))
	}
}

func (p *panicky) kinds() []ormlock.EventKind {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]ormlock.EventKind(nil), p.seen...)
}

// panicLog records what is logged.
type panicLog struct{ testdb.LogRecorder }

// reports returns the number of observer panic reports on event ev logged
// since the last call, and the records that do not match.
func (c *panicLog) reports(ev ormlock.EventKind) (n int, odd []string) {
	for _, r := range c.Take() {
		if !strings.Contains(r.Message, "observer panicked") {
			continue
		}
		n++
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
		if attrs["event"] != ev.String() || !strings.Contains(attrs["panic"], "cardinality") || attrs["stack"] == "" {
			odd = append(odd, fmt.Sprintf("%q %v", r.Message, attrs))
		}
	}
	return n, odd
}

// panicOutcome is the error the verb returns in the scenario of ev, the
// same as with a quiet observer.
func panicOutcome(ev ormlock.EventKind) error {
	switch ev {
	case ormlock.EventNotAcquired:
		return ormlock.ErrNotAcquired
	case ormlock.EventLockLost:
		return ormlock.ErrLockLost
	case ormlock.EventAlreadyDone:
		return ormlock.ErrAlreadyDone
	}
	return nil
}

// What an observer is told besides the event's kind: RunOnce's job, and
// SlogObserver's lines for real events.

// RunOnce's events name the job (Event.Job), whose values are bounded,
// unlike its key, which has the slot in it; other verbs leave Job empty.
func TestObserverEventJob(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r := openRunner(t, a, k)
		tbl := ormlock.WithLedgerTable(ledgerTable(t, k, r))
		var mu sync.Mutex
		jobs := map[string][]string{} // verb -> Event.Job of each event
		obs := ormlock.WithObserver(ormlock.ObserverFunc(func(_ context.Context, e ormlock.Event) {
			mu.Lock()
			defer mu.Unlock()
			jobs[e.Verb] = append(jobs[e.Verb], e.Job)
		}))
		job := "job-" + t.Name()
		nop := func(txn) error { return nil }
		for _, mode := range []ormlock.Option{nil, ormlock.WithClaim()} {
			if err := r.RunOnce(ctx, job, testdb.Slot(0), nop, obs, tbl, mode); err != nil && mode == nil {
				t.Fatal(err)
			}
		}
		if err := r.Transaction(ctx, job, nop, obs); err != nil {
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
		if len(jobs["Transaction"]) == 0 {
			t.Fatal("no Transaction event")
		}
		for _, j := range jobs["Transaction"] {
			if j != "" {
				t.Errorf("Transaction event Job = %q, want empty", j)
			}
		}
	})
}

// TestObserverSlogReal feeds SlogObserver real events, given as the
// adapter's default observer: one replica runs the job, another finds it
// held. Run with -v to see the lines (docs/TROUBLESHOOTING.md shows them).
func TestObserverSlogReal(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		var out testdb.SyncBuffer
		logger := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
		opts := []ormlock.Option{ormlock.WithObserver(ormlock.SlogObserver(logger)), ormlock.WithNamespace("billing")}
		ra, rb := a.with(t, k, opts...), a.with(t, k, opts...)
		key := "daily-settlement-" + string(k)
		err := ra.Transaction(ctx, key, func(tx txn) error {
			err := rb.Transaction(ctx, key, func(txn) error { return errors.New("ran twice") })
			if !errors.Is(err, ormlock.ErrNotAcquired) {
				return fmt.Errorf("second replica: %v", err)
			}
			_, err = queryInt(tx, "SELECT 1")
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("slog output:\n%s", out.String())
		want := []string{
			`level=DEBUG msg="ormlock: attempt" verb=Transaction dialect=` + k.Dialect(),
			`level=DEBUG msg="ormlock: acquired"`,
			`level=DEBUG msg="ormlock: attempt"`,
			`level=INFO msg="ormlock: not_acquired"`,
			`level=INFO msg="ormlock: released"`,
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if len(lines) != len(want) {
			t.Fatalf("%d lines, want %d", len(lines), len(want))
		}
		for i, w := range want {
			if !strings.Contains(lines[i], w) || !strings.Contains(lines[i], "namespace=billing") {
				t.Errorf("line %d = %s\nwant it to contain %s and namespace=billing", i, lines[i], w)
			}
		}
	})
}
