package entlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/enttest/ent"
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

// An observer that panics, on any event, of any verb, on any server, costs
// neither the lock nor its connection nor the process: the verb ends as it
// would have with a quiet observer, the lock is free afterwards, no
// connection is in use, and the panic is reported once on slog.Default. A
// panic on lock_lost, which runs on the Session's keepalive goroutine, would
// otherwise end the test binary.
func TestObserverPanicContained(t *testing.T) {
	logs := &slogCapture{}
	prev := slog.Default()
	slog.SetDefault(slog.New(logs))
	t.Cleanup(func() { slog.SetDefault(prev) })

	verbs := []string{"Transaction", "Session", "RunOnce", "RunOnce claim"}
	events := []ormlock.EventKind{
		ormlock.EventAttempt, ormlock.EventAcquired, ormlock.EventNotAcquired, ormlock.EventReleased,
		ormlock.EventReleaseFailed, ormlock.EventLockLost, ormlock.EventAlreadyDone,
	}
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		client, sqlDB := openEnt(t, k)
		tbl := ledgerTable(t, k, client)
		for _, verb := range verbs {
			for _, ev := range events {
				if !panicApplies(verb, ev, k) {
					continue
				}
				t.Run(strings.ReplaceAll(verb, " ", "_")+"/"+ev.String(), func(t *testing.T) {
					logs.reports(0)
					obs := &panicky{on: ev}
					err := provokeEnt(t, k, client, verb, ev, obs, tbl)
					if want := panicOutcome(ev); want == nil && err != nil || want != nil && !errors.Is(err, want) {
						t.Errorf("%s: err = %v, want %v", verb, err, want)
					}
					if seen := obs.kinds(); !containsKind(seen, ev) {
						t.Fatalf("the observer never got %s: %v", ev, seen)
					}
					if n, odd := logs.reports(ev); n != 1 || len(odd) > 0 {
						t.Errorf("observer panic reported %d times, want once; unexpected reports: %v", n, odd)
					}
					testdb.AssertNoLeaks(t, k, sqlDB)
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

// provokeEnt calls verb with obs so that event ev happens, and returns the
// verb's error; a release failure on a dedicated connection is a loss found
// at release, so its ErrLockLost is dropped here.
func provokeEnt(t *testing.T, k testdb.Kind, client *ent.Client, verb string, ev ormlock.EventKind, obs ormlock.Observer, tbl string) error {
	t.Helper()
	ctx := context.Background()
	name := "opanic-" + t.Name()
	job, slot := name, slotAt(int(ev))
	key := ormlock.Name(name)
	if strings.HasPrefix(verb, "RunOnce") {
		key = keys.RunKey(job, slot)
	}
	var claim []ormlock.Option
	if verb == "RunOnce claim" {
		claim = []ormlock.Option{ormlock.WithClaim()}
	}
	opts := append([]ormlock.Option{ormlock.WithObserver(obs), ormlock.WithLedgerTable(tbl)}, claim...)
	switch ev {
	case ormlock.EventNotAcquired:
		defer rawHold(t, k, key.String())()
	case ormlock.EventLockLost:
		opts = append(opts, ormlock.WithKeepalive(100*time.Millisecond))
	case ormlock.EventReleaseFailed:
		opts = append(opts, ormlock.WithKeepalive(time.Hour))
	case ormlock.EventAlreadyDone:
		first := append([]ormlock.Option{ormlock.WithLedgerTable(tbl)}, claim...)
		if err := entlock.RunOnce(ctx, client, job, slot, func(*ent.Tx) error { return nil }, first...); err != nil {
			t.Fatalf("first run: %v", err)
		}
	}

	// body is fn's work: nothing, or what makes the lock fail or get lost
	body := func(ctx context.Context, tx *ent.Tx) error {
		switch {
		case ev == ormlock.EventReleaseFailed && tx != nil && verb != "RunOnce claim":
			// the lock released behind ormlock's back: RELEASE_LOCK fails
			_, err := tx.ExecContext(ctx, "DO RELEASE_LOCK(?)", keyhash.MySQLName("", key.String()))
			return err
		case ev == ormlock.EventReleaseFailed, ev == ormlock.EventLockLost:
			h, err := entlock.Holder(ctx, client, key)
			if err != nil || !h.Held {
				return fmt.Errorf("holder: %v %v", h, err)
			}
			testdb.Kill(t, k, h.PID)
			if ev == ormlock.EventReleaseFailed { // no keepalive check: the release finds it
				return waitGone(t, k, h.PID)
			}
			if verb == "RunOnce claim" {
				// fn's tx is bound to the lock's session: it fails once
				// the loss is seen
				for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
					if _, err := tx.Item.Query().Count(ctx); err != nil {
						return err
					}
				}
				return errors.New("fn's transaction survived the lock for 30s")
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
		err = entlock.Transaction(ctx, client, key, func(tx *ent.Tx) error { return body(ctx, tx) }, opts...)
	case "Session":
		err = entlock.Session(ctx, client, key, func(ctx context.Context) error { return body(ctx, nil) }, opts...)
	default:
		err = entlock.RunOnce(ctx, client, job, slot, func(tx *ent.Tx) error { return body(ctx, tx) }, opts...)
	}
	if ev == ormlock.EventReleaseFailed && errors.Is(err, ormlock.ErrLockLost) {
		return nil
	}
	return err
}

// waitGone waits (up to 10s) until the server connection id has ended.
func waitGone(t *testing.T, k testdb.Kind, id int64) error {
	t.Helper()
	q := "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?"
	if k.Dialect() == "postgres" {
		q = "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = $1"
	}
	admin := testdb.AdminDB(t, k)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var n int
		if err := admin.QueryRow(q, id).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
	}
	return fmt.Errorf("connection %d still there after 10s", id)
}

// txPanics is a client whose Tx panics after the Driver began the locked
// transaction, as a layer between the verb and the Driver (a hook, a
// wrapper) might.
type txPanics struct{ c *ent.Client }

func (p txPanics) Tx(ctx context.Context) (*ent.Tx, error) {
	if _, err := p.c.Tx(ctx); err != nil {
		return nil, err
	}
	panic("client.Tx: after the driver")
}

// A panic between the lock and fn still releases the lock and the
// connection.
func TestPanicAfterLockReleases(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		client, sqlDB := openEnt(t, k)
		tbl := ledgerTable(t, k, client)
		name := "panic-after-lock-" + t.Name()
		for _, verb := range []string{"Transaction", "RunOnce"} {
			func() {
				defer func() {
					if p := recover(); p == nil {
						t.Errorf("%s: no panic", verb)
					}
				}()
				if verb == "Transaction" {
					_ = entlock.Transaction(context.Background(), txPanics{client}, name, func(*ent.Tx) error { return nil })
				} else {
					_ = entlock.RunOnce(context.Background(), txPanics{client}, name, slotAt(0), func(*ent.Tx) error { return nil }, ormlock.WithLedgerTable(tbl))
				}
			}()
			testdb.AssertNoLeaks(t, k, sqlDB)
		}
	})
}
