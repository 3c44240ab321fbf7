package ormlock_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

func attrsOf(r slog.Record) map[string]slog.Value {
	m := map[string]slog.Value{}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value; return true })
	return m
}

// The events here are built by hand: this test is about formatting and
// levels. gormlock's observer tests feed SlogObserver real events from real
// servers.
func TestSlogObserverLevelsAndAttrs(t *testing.T) {
	boom := errors.New("boom")
	base := ormlock.Event{Verb: "Transaction", Dialect: "postgres", Key: ormlock.Name("daily-settlement")}
	with := func(kind ormlock.EventKind, f func(*ormlock.Event)) ormlock.Event {
		e := base
		e.Kind = kind
		if f != nil {
			f(&e)
		}
		return e
	}
	cases := []struct {
		e       ormlock.Event
		level   slog.Level
		msg     string
		want    []string // attribute keys, in order
		wantErr error
	}{
		{with(ormlock.EventAttempt, nil), slog.LevelDebug, "ormlock: attempt", []string{"verb", "dialect", "key"}, nil},
		{with(ormlock.EventAcquired, func(e *ormlock.Event) { e.Wait = 3 * time.Millisecond }), slog.LevelDebug, "ormlock: acquired", []string{"verb", "dialect", "key", "wait"}, nil},
		{with(ormlock.EventNotAcquired, nil), slog.LevelInfo, "ormlock: not_acquired", []string{"verb", "dialect", "key", "wait"}, nil},
		{with(ormlock.EventNotAcquired, func(e *ormlock.Event) { e.Err = context.DeadlineExceeded }), slog.LevelInfo, "ormlock: not_acquired", []string{"verb", "dialect", "key", "wait", "err"}, context.DeadlineExceeded},
		{with(ormlock.EventNotAcquired, func(e *ormlock.Event) { e.Err = boom }), slog.LevelWarn, "ormlock: not_acquired", []string{"verb", "dialect", "key", "wait", "err"}, boom},
		{with(ormlock.EventReleased, func(e *ormlock.Event) { e.Held = time.Second; e.Namespace = "billing" }), slog.LevelInfo, "ormlock: released", []string{"verb", "dialect", "key", "namespace", "held"}, nil},
		{with(ormlock.EventReleaseFailed, func(e *ormlock.Event) { e.Err = boom }), slog.LevelError, "ormlock: release_failed", []string{"verb", "dialect", "key", "held", "err"}, boom},
		{with(ormlock.EventLockLost, func(e *ormlock.Event) { e.Err = boom; e.Verb = "Session"; e.Namespace = "ns" }), slog.LevelError, "ormlock: lock_lost", []string{"verb", "dialect", "key", "namespace", "held", "err"}, boom},
		{with(ormlock.EventAlreadyDone, func(e *ormlock.Event) { e.Verb = "RunOnce" }), slog.LevelInfo, "ormlock: already_done", []string{"verb", "dialect", "key"}, nil},
		{with(ormlock.EventSemaphoreMismatch, func(e *ormlock.Event) { e.Err = boom }), slog.LevelWarn, "ormlock: semaphore_mismatch", []string{"verb", "dialect", "key", "err"}, boom},
	}
	h := &testdb.LogRecorder{}
	obs := ormlock.SlogObserver(slog.New(h))
	for _, c := range cases {
		obs.Observe(context.Background(), c.e)
	}
	recs := h.Records()
	if len(recs) != len(cases) {
		t.Fatalf("%d records for %d events", len(recs), len(cases))
	}
	for i, c := range cases {
		r := recs[i]
		if r.Level != c.level || r.Message != c.msg {
			t.Errorf("%v: level=%v msg=%q, want %v %q", c.e.Kind, r.Level, r.Message, c.level, c.msg)
		}
		var keys []string
		r.Attrs(func(a slog.Attr) bool { keys = append(keys, a.Key); return true })
		if strings.Join(keys, ",") != strings.Join(c.want, ",") {
			t.Errorf("%v: attrs %v, want %v", c.e.Kind, keys, c.want)
		}
		a := attrsOf(r)
		if a["verb"].String() != c.e.Verb || a["dialect"].String() != "postgres" || a["key"].String() != "daily-settlement" {
			t.Errorf("%v: attrs %v", c.e.Kind, a)
		}
		if v, ok := a["namespace"]; ok && v.String() != c.e.Namespace {
			t.Errorf("%v: namespace %v", c.e.Kind, v)
		}
		if v, ok := a["wait"]; ok && v.Duration() != c.e.Wait {
			t.Errorf("%v: wait %v, want %v", c.e.Kind, v, c.e.Wait)
		}
		if v, ok := a["held"]; ok && v.Duration() != c.e.Held {
			t.Errorf("%v: held %v, want %v", c.e.Kind, v, c.e.Held)
		}
		if c.wantErr != nil {
			if err, _ := a["err"].Any().(error); !errors.Is(err, c.wantErr) {
				t.Errorf("%v: err attr %v, want %v", c.e.Kind, a["err"], c.wantErr)
			}
		}
	}
}

func TestSlogObserverText(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	obs := ormlock.SlogObserver(logger)
	ctx := context.Background()
	e := ormlock.Event{Verb: "Transaction", Dialect: "mysql", Key: ormlock.ID(42), Namespace: "billing"}
	e.Kind = ormlock.EventAttempt // Debug: below the handler's Info
	obs.Observe(ctx, e)
	e.Kind, e.Held = ormlock.EventReleased, 1500*time.Millisecond
	obs.Observe(ctx, e)
	want := `level=INFO msg="ormlock: released" verb=Transaction dialect=mysql key=id:42 namespace=billing held=1.5s` + "\n"
	if buf.String() != want {
		t.Fatalf("got  %q\nwant %q", buf.String(), want)
	}
}

func TestSlogObserverNilLoggerUsesDefault(t *testing.T) {
	h := &testdb.LogRecorder{}
	old := slog.Default()
	slog.SetDefault(slog.New(h))
	t.Cleanup(func() { slog.SetDefault(old) })
	ormlock.SlogObserver(nil).Observe(context.Background(), ormlock.Event{Kind: ormlock.EventLockLost, Verb: "Session", Key: ormlock.Name("k")})
	if recs := h.Records(); len(recs) != 1 || recs[0].Message != "ormlock: lock_lost" {
		t.Fatalf("records %v", recs)
	}
}

// A disabled level costs nothing, and an enabled one allocates nothing of
// its own for a name key (the handler here keeps nothing).
func TestSlogObserverAllocs(t *testing.T) {
	ctx := context.Background()
	e := ormlock.Event{Kind: ormlock.EventAcquired, Verb: "Transaction", Dialect: "postgres", Key: ormlock.Name("k"), Namespace: "ns", Wait: time.Millisecond}
	for _, c := range []struct {
		name string
		h    slog.Handler
		max  float64
	}{
		{"discard", slog.DiscardHandler, 0},
		{"info-level text, debug event", slog.NewTextHandler(io.Discard, nil), 0},
		{"enabled no-op handler", nopHandler{}, 0},
	} {
		obs := ormlock.SlogObserver(slog.New(c.h))
		got := testing.AllocsPerRun(200, func() { obs.Observe(ctx, e) })
		t.Logf("%s: %.1f allocs per event", c.name, got)
		if got > c.max {
			t.Errorf("%s: %.1f allocs per event, want <= %.0f", c.name, got, c.max)
		}
	}
	obs := ormlock.SlogObserver(slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Logf("debug-level text handler to io.Discard: %.1f allocs per event", testing.AllocsPerRun(200, func() { obs.Observe(ctx, e) }))
}

type nopHandler struct{}

func (nopHandler) Enabled(context.Context, slog.Level) bool  { return true }
func (nopHandler) Handle(context.Context, slog.Record) error { return nil }
func (h nopHandler) WithAttrs([]slog.Attr) slog.Handler      { return h }
func (h nopHandler) WithGroup(string) slog.Handler           { return h }

// Log every lock event of a GORM database through log/slog:
//
//	db.Use(gormlock.New(ormlock.WithObserver(ormlock.SlogObserver(logger))))
//
// or per call, as here.
func ExampleSlogObserver() {
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opt := ormlock.WithObserver(ormlock.SlogObserver(logger))
	_ = opt // pass to gormlock.Transaction, Session, RunOnce or gormlock.New
}
