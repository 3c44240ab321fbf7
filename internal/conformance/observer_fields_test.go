package conformance_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

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

// lockedWriter is a writer safe for the loggers of several goroutines.
type lockedWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestObserverSlogReal feeds SlogObserver real events, given as the
// adapter's default observer: one replica runs the job, another finds it
// held. Run with -v to see the lines (docs/TROUBLESHOOTING.md shows them).
func TestObserverSlogReal(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		var out lockedWriter
		logger := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
		opts := []ormlock.Option{ormlock.WithObserver(ormlock.SlogObserver(logger)), ormlock.WithNamespace("billing")}
		ra, rb := a.with(t, k, opts...), a.with(t, k, opts...)
		key := "daily-settlement-" + string(k)
		err := ra.Transaction(ctx, key, func(tx txn) error {
			err := rb.Transaction(ctx, key, func(txn) error { return errors.New("ran twice") })
			if !errors.Is(err, ormlock.ErrNotAcquired) {
				return fmt.Errorf("second replica: %v", err)
			}
			_, err = tx.QueryInt("SELECT 1")
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
