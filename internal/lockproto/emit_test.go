package lockproto_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

// Emit contains an observer's panic, reports the first one of an Op once on
// slog.Default (from any goroutine), and keeps delivering the Op's events.
func TestEmitContainsObserverPanic(t *testing.T) {
	h := &testdb.LogRecorder{}
	prev := slog.Default()
	slog.SetDefault(slog.New(h))
	t.Cleanup(func() { slog.SetDefault(prev) })

	var calls atomic.Int32
	var job atomic.Value
	obs := ormlock.ObserverFunc(func(_ context.Context, e ormlock.Event) {
		calls.Add(1)
		job.Store(e.Job)
		panic("label mismatch")
	})
	op, err := lockproto.NewOp(lockproto.MySQL, "RunOnce", keys.Name("k"), config.New(ormlock.WithObserver(obs)))
	if err != nil {
		t.Fatal(err)
	}
	op.Job = "nightly"
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for _, k := range []ormlock.EventKind{ormlock.EventAttempt, ormlock.EventAcquired, ormlock.EventLockLost, ormlock.EventReleased} {
				op.Emit(context.Background(), k, nil)
			}
		})
	}
	wg.Wait()
	if n := calls.Load(); n != 32 {
		t.Errorf("observer called %d times, want 32: events stop after a panic", n)
	}
	if j := job.Load(); j != "nightly" {
		t.Errorf("Event.Job = %v, want the Op's job", j)
	}
	recs := h.Take()
	if len(recs) != 1 {
		t.Fatalf("%d reports, want one per Op", len(recs))
	}
	r := recs[0]
	attrs := map[string]string{}
	r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
	if r.Message != lockproto.ObserverPanicMessage || r.Level != slog.LevelError || attrs["panic"] != "label mismatch" ||
		attrs["event"] == "" || attrs["verb"] != "RunOnce" || attrs["key"] != "k" || !strings.Contains(attrs["stack"], "Emit") {
		t.Errorf("report: %s %q %v", r.Level, r.Message, attrs)
	}

	// another Op (another verb call) reports its own first panic
	op2, err := lockproto.NewOp(lockproto.Postgres, "Transaction", keys.Name("k"), config.New(ormlock.WithObserver(obs)))
	if err != nil {
		t.Fatal(err)
	}
	op2.Emit(context.Background(), config.EventAttempt, nil)
	op2.Emit(context.Background(), config.EventNotAcquired, nil)
	if n := len(h.Take()); n != 1 {
		t.Errorf("second Op: %d reports, want 1", n)
	}
}
