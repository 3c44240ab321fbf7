package testdb

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

	"github.com/ormlock/ormlock"
)

// Provoke makes verb ("Transaction", "Session", "RunOnce" or "RunOnce
// claim") produce event ev with observer obs, and returns the verb's error.
type Provoke func(t *testing.T, verb string, ev ormlock.EventKind, obs ormlock.Observer) error

// ObserverPanicSuite is the observer-panic suite, written once for both
// adapters: an observer that panics, on any event, of any verb, on any
// server, costs neither the lock nor its connection nor the process. The
// verb ends as it would have with a quiet observer, the observer still gets
// the later events, the lock is free afterwards, no connection is in use,
// and the panic is reported once on slog.Default (a panic on lock_lost,
// which runs on the Session's keepalive goroutine, would otherwise end the
// test binary). open returns, for kind k, the pool the adapter uses and its
// Provoke.
func ObserverPanicSuite(t *testing.T, open func(t *testing.T, k Kind) (*sql.DB, Provoke)) {
	logs := &slogCapture{}
	prev := slog.Default()
	slog.SetDefault(slog.New(logs))
	t.Cleanup(func() { slog.SetDefault(prev) })
	verbs := []string{"Transaction", "Session", "RunOnce", "RunOnce claim"}
	events := []ormlock.EventKind{
		ormlock.EventAttempt, ormlock.EventAcquired, ormlock.EventNotAcquired, ormlock.EventReleased,
		ormlock.EventReleaseFailed, ormlock.EventLockLost, ormlock.EventAlreadyDone,
	}
	ForEachKind(t, func(t *testing.T, k Kind) {
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
					AssertNoLeaks(t, k, sqlDB)
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
func panicApplies(verb string, ev ormlock.EventKind, k Kind) bool {
	dedicated := verb == "Session" || verb == "RunOnce claim"
	switch ev {
	case ormlock.EventReleaseFailed:
		return dedicated || k == MariaDB
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

// slogCapture is a slog.Handler that records what is logged.
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

// reports returns the number of observer panic reports on event ev logged
// since the last call, and the records that do not match.
func (c *slogCapture) reports(ev ormlock.EventKind) (n int, odd []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.recs {
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
	c.recs = nil
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
