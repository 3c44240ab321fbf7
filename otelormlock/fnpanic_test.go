package otelormlock_test

import (
	"context"
	"runtime"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// panicCall is one verb call whose fn runs in; span is the name of the
// verb's span.
type panicCall struct {
	name, span string
	call       func(ctx context.Context, in func(), opts ...ormlock.Option) error
}

// panicCalls are the verbs of v with each kind of key and connection:
// Transaction and Session on a key, on an All set and (Session) on a
// Semaphore, Session on a shared lock connection (not behind PgBouncer,
// which refuses them), RunOnce in both modes, Lead.
func panicCalls(t *testing.T, k testdb.Kind, v verbs, tbl string) []panicCall {
	key := "otel-fn-panic-" + t.Name()
	set := ormlock.All(key+"/a", key+"/b")
	in := func(in func()) func(context.Context) error { return func(context.Context) error { in(); return nil } }
	session := func(key ormlock.Key, more ...ormlock.Option) func(ctx context.Context, fn func(), opts ...ormlock.Option) error {
		return func(ctx context.Context, fn func(), opts ...ormlock.Option) error {
			return v.session(ctx, key, in(fn), append(opts, more...)...)
		}
	}
	jobs := 0
	runOnce := func(more ...ormlock.Option) func(ctx context.Context, fn func(), opts ...ormlock.Option) error {
		return func(ctx context.Context, fn func(), opts ...ormlock.Option) error {
			jobs++
			return v.runOnce(ctx, key+"-"+string(rune('a'+jobs)), testdb.Slot(0), in(fn), append(opts, append(more, ormlock.WithLedgerTable(tbl))...)...)
		}
	}
	cs := []panicCall{
		{"Transaction", "ormlock.Transaction", func(ctx context.Context, fn func(), opts ...ormlock.Option) error {
			return v.tx(ctx, ormlock.Name(key), in(fn), opts...)
		}},
		{"Transaction/All", "ormlock.Transaction", func(ctx context.Context, fn func(), opts ...ormlock.Option) error {
			return v.tx(ctx, set, in(fn), opts...)
		}},
		{"Session/All", "ormlock.Session", session(set)},
		{"Session", "ormlock.Session", session(ormlock.Name(key))},
		{"Session/Semaphore", "ormlock.Session", session(ormlock.Semaphore(key, 2))},
		{"RunOnce", "ormlock.RunOnce", runOnce()},
		{"RunOnce/claim", "ormlock.RunOnce", runOnce(ormlock.WithClaim())},
		{"Lead", "ormlock.Lead", func(ctx context.Context, fn func(), opts ...ormlock.Option) error {
			return v.lead(ctx, key, in(fn), opts...)
		}},
	}
	if k != testdb.PgBouncer {
		cs = append(cs, panicCall{"Session/shared", "ormlock.Session", session(ormlock.Name(key), ormlock.WithSharedLockConns(1))})
	}
	return cs
}

// TestPanicSpans: when fn panics or calls runtime.Goexit, every verb of
// every adapter ends its span (and a Lead's term span) before the panic
// goes on, with status Error and the *ormlock.PanicError recorded: the
// panic's value in its message, the stack in its exception event; the
// gauges come back to zero.
func TestPanicSpans(t *testing.T) {
	forEach(t, func(t *testing.T, k testdb.Kind, v verbs) {
		tbl := testdb.Table(t, k, "otelpanic")
		if err := v.migrate(context.Background(), ormlock.WithLedgerTable(tbl)); err != nil {
			t.Fatal(err)
		}
		for _, c := range panicCalls(t, k, v, tbl) {
			t.Run(c.name, func(t *testing.T) {
				tel := newTelemetry()
				want := "fn-boom-" + t.Name()
				got := func() (p any) {
					defer func() { p = recover() }()
					err := c.call(context.Background(), func() { panic(want) }, tel.opt)
					t.Errorf("returned %v after fn panicked", err)
					return nil
				}()
				if got != want {
					t.Errorf("the caller recovered %v, want %q", got, want)
				}
				checkPanicSpan(t, tel, c.span, want)

				tel = newTelemetry()
				done := make(chan struct{})
				go func() {
					defer close(done)
					_ = c.call(context.Background(), runtime.Goexit, tel.opt)
				}()
				<-done
				checkPanicSpan(t, tel, c.span, "runtime.Goexit")
			})
		}
	})
}

// checkPanicSpan checks that tel's one verb span, name, ended with status
// Error and an exception event whose message has msg in it and a stack,
// that no span was left open, and that the gauges are back to zero.
func checkPanicSpan(t *testing.T, tel *telemetry, name, msg string) {
	t.Helper()
	if started, ended := len(tel.spans.Started()), len(tel.spans.Ended()); started != ended {
		t.Errorf("%d spans started, %d ended", started, ended)
	}
	s := tel.span(t, name)
	if st := s.Status(); st.Code != codes.Error || !strings.Contains(st.Description, msg) {
		t.Errorf("%s: status %v %q, want Error with %q", name, st.Code, st.Description, msg)
	}
	if e, ok := exception(s); !ok {
		t.Errorf("%s: no exception event: %v", name, s.Events())
	} else if m, _ := attrOf(e, "exception.message"); !strings.Contains(m, "ormlock: fn") || !strings.Contains(m, msg) {
		t.Errorf("%s: exception.message %q, want the PanicError's with %q", name, m, msg)
	} else if st, _ := attrOf(e, "exception.stacktrace"); !strings.Contains(st, "fnpanic_test.go") {
		t.Errorf("%s: exception.stacktrace does not reach fn:\n%s", name, st)
	}
	ms := tel.metrics(t)
	for _, g := range []string{"ormlock.lock.held", "ormlock.lock.waiting"} {
		if n := sumBy(t, ms, g, "", ""); n != 0 {
			t.Errorf("%s: %d after the panic", g, n)
		}
	}
}

// exception is s's exception event (RecordError's).
func exception(s sdktrace.ReadOnlySpan) (sdktrace.Event, bool) {
	for _, e := range s.Events() {
		if e.Name == "exception" {
			return e, true
		}
	}
	return sdktrace.Event{}, false
}

func attrOf(e sdktrace.Event, key string) (string, bool) {
	for _, a := range e.Attributes {
		if string(a.Key) == key {
			return a.Value.AsString(), true
		}
	}
	return "", false
}
