package testdb

import (
	"context"
	"log/slog"
	"sync"
)

// LogRecorder is a slog.Handler that keeps every record it is handed, at
// every level, for tests that check what ormlock logs (SlogObserver, an
// observer's contained panic). It is safe for concurrent use.
type LogRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

// Enabled reports true for every level.
func (h *LogRecorder) Enabled(context.Context, slog.Level) bool { return true }

// Handle keeps a copy of r.
func (h *LogRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

// WithAttrs returns h itself: the attributes are not recorded.
func (h *LogRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }

// WithGroup returns h itself: the group is not recorded.
func (h *LogRecorder) WithGroup(string) slog.Handler { return h }

// Records returns the records kept so far.
func (h *LogRecorder) Records() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]slog.Record(nil), h.recs...)
}

// Take returns the records kept so far and forgets them.
func (h *LogRecorder) Take() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.recs
	h.recs = nil
	return r
}
