package gormlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
)

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

// slogCapture replaces slog.Default for the test and records what is logged.
type slogCapture struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (c *slogCapture) Enabled(context.Context, slog.Level) bool { return true }
func (c *slogCapture) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recs = append(c.recs, r.Clone())
	return nil
}
func (c *slogCapture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *slogCapture) WithGroup(string) slog.Handler      { return c }

// take returns the records logged since the last call.
func (c *slogCapture) take() []slog.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.recs
	c.recs = nil
	return r
}

func captureSlog(t *testing.T) *slogCapture {
	t.Helper()
	c := &slogCapture{}
	prev := slog.Default()
	slog.SetDefault(slog.New(c))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return c
}

// checkPanicReported checks that exactly one record reports the observer's
// panic on event ev.
func checkPanicReported(t *testing.T, c *slogCapture, ev ormlock.EventKind) {
	t.Helper()
	var n int
	for _, r := range c.take() {
		if !strings.Contains(r.Message, "observer panicked") {
			continue
		}
		n++
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
		if attrs["event"] != ev.String() || !strings.Contains(attrs["panic"], "cardinality") || attrs["stack"] == "" {
			t.Errorf("report of the panic: %q %v", r.Message, attrs)
		}
	}
	if n != 1 {
		t.Errorf("observer panic reported %d times, want once", n)
	}
}

// panicVerbs are the verbs under test; the claim mode of RunOnce holds its
// lock as Session does, so it has Session's events.
var panicVerbs = []string{"Transaction", "Session", "RunOnce", "RunOnce claim"}

var panicEvents = []ormlock.EventKind{
	ormlock.EventAttempt, ormlock.EventAcquired, ormlock.EventNotAcquired, ormlock.EventReleased,
	ormlock.EventReleaseFailed, ormlock.EventLockLost, ormlock.EventAlreadyDone,
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

// An observer that panics, on any event, of any verb, on any server, costs
// neither the lock nor its connection nor the process: the verb ends as it
// would have with a quiet observer, the lock is free afterwards, no
// connection is in use, and the panic is reported once on slog.Default. A
// panic on lock_lost, which runs on the Session's keepalive goroutine, would
// otherwise end the test binary.
func TestObserverPanicContained(t *testing.T) {
	logs := captureSlog(t)
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, sqlDB := openGorm(t, k)
		tbl := ledgerTable(t, k, db)
		for _, verb := range panicVerbs {
			for _, ev := range panicEvents {
				if !panicApplies(verb, ev, k) {
					continue
				}
				t.Run(strings.ReplaceAll(verb, " ", "_")+"/"+ev.String(), func(t *testing.T) {
					logs.take()
					obs := &panicky{on: ev}
					err := provokeGorm(t, k, db, verb, ev, obs, tbl)
					if want := panicOutcome(ev); want == nil && err != nil || want != nil && !errors.Is(err, want) {
						t.Errorf("%s: err = %v, want %v", verb, err, want)
					}
					seen := obs.kinds()
					if !containsKind(seen, ev) {
						t.Fatalf("the observer never got %s: %v", ev, seen)
					}
					if last := seen[len(seen)-1]; ev != last && last == ormlock.EventAttempt {
						t.Errorf("no event after the panic on %s: %v", ev, seen)
					}
					checkPanicReported(t, logs, ev)
					testdb.AssertNoLeaks(t, k, sqlDB)
					if n := sqlDB.Stats().InUse; n != 0 {
						t.Errorf("InUse = %d after the call", n)
					}
				})
			}
		}
	})
}

// panicOutcome is the error the verb returns in the scenario of ev.
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

func containsKind(ks []ormlock.EventKind, k ormlock.EventKind) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

// provokeGorm calls verb with obs so that event ev happens, and returns the
// verb's error; a release failure on a dedicated connection is a loss found
// at release, so its ErrLockLost is dropped here.
func provokeGorm(t *testing.T, k testdb.Kind, db *gorm.DB, verb string, ev ormlock.EventKind, obs ormlock.Observer, tbl string) error {
	t.Helper()
	name := "opanic-" + t.Name()
	job, slot := name, slotAt(int(ev))
	key := ormlock.Name(name)
	if strings.HasPrefix(verb, "RunOnce") {
		key = keys.RunKey(job, slot)
	}
	opts := []ormlock.Option{ormlock.WithObserver(obs), ormlock.WithLedgerTable(tbl)}
	switch ev {
	case ormlock.EventNotAcquired:
		defer rawHold(t, k, key.String())()
	case ormlock.EventLockLost:
		opts = append(opts, ormlock.WithKeepalive(100*time.Millisecond))
	case ormlock.EventReleaseFailed:
		opts = append(opts, ormlock.WithKeepalive(time.Hour))
	case ormlock.EventAlreadyDone:
		rest := append([]ormlock.Option{ormlock.WithLedgerTable(tbl)}, claimOpt(verb)...)
		if err := gormlock.RunOnce(db, job, slot, func(*gorm.DB) error { return nil }, rest...); err != nil {
			t.Fatalf("first run: %v", err)
		}
	}
	opts = append(opts, claimOpt(verb)...)

	// body is fn's work: nothing, or what makes the lock fail or get lost
	body := func(ctx context.Context, tx *gorm.DB) error {
		switch {
		case ev == ormlock.EventReleaseFailed && tx != nil && verb != "RunOnce claim":
			// the lock released behind ormlock's back: RELEASE_LOCK fails
			return tx.Exec("DO RELEASE_LOCK(?)", keyhash.MySQLName("", key.String())).Error
		case ev == ormlock.EventReleaseFailed, ev == ormlock.EventLockLost:
			h, err := gormlock.Holder(db, key)
			if err != nil || !h.Held {
				return fmt.Errorf("holder: %v %v", h, err)
			}
			testdb.Kill(t, k, h.PID)
			if ev == ormlock.EventReleaseFailed { // no keepalive check: the release finds it
				testdb.WaitGone(t, k, h.PID)
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(30 * time.Second):
				return errors.New("loss not seen within 30s")
			}
		}
		return nil
	}
	var err error
	switch verb {
	case "Transaction":
		err = gormlock.Transaction(db, key, func(tx *gorm.DB) error { return body(tx.Statement.Context, tx) }, opts...)
	case "Session":
		err = gormlock.Session(db, key, func(ctx context.Context) error { return body(ctx, nil) }, opts...)
	default:
		err = gormlock.RunOnce(db, job, slot, func(tx *gorm.DB) error { return body(tx.Statement.Context, tx) }, opts...)
	}
	if ev == ormlock.EventReleaseFailed && errors.Is(err, ormlock.ErrLockLost) {
		return nil
	}
	return err
}

func claimOpt(verb string) []ormlock.Option {
	if verb == "RunOnce claim" {
		return []ormlock.Option{ormlock.WithClaim()}
	}
	return nil
}
