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
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
)

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
				r := openRunner(t, a, k)
				tbl := ledgerTable(t, k, r)
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
					if _, err := tx.QueryInt("SELECT 1"); err != nil {
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
