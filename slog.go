package ormlock

import (
	"context"
	"errors"
	"log/slog"
)

// SlogObserver returns an [Observer] that writes every event to logger as one
// structured record whose message is "ormlock: " and the event's name (e.g.
// "ormlock: not_acquired"); a nil logger means slog.Default() at the time of
// each event. At the default Info level each use of a lock leaves one line
// that says how it ended; the steps in between are Debug, failures Warn or
// Error. Use it per call or as a plugin default ([WithObserver]). Levels and
// attributes: docs/PROTOCOL.md (Events and SlogObserver).
func SlogObserver(logger *slog.Logger) Observer { return slogObserver{l: logger} }

type slogObserver struct{ l *slog.Logger }

// slogMessages are the record messages per EventKind, "ormlock: " + its
// name, built once so that logging an event allocates no message.
var slogMessages = func() (m [EventSemaphoreMismatch + 1]string) {
	for i := range m {
		m[i] = "ormlock: " + EventKind(i).String()
	}
	m[0] = "ormlock: unknown"
	return m
}()

// slogLevel is the level of e; see SlogObserver.
func slogLevel(e Event) slog.Level {
	switch e.Kind {
	case EventAttempt, EventAcquired:
		return slog.LevelDebug
	case EventNotAcquired:
		if e.Err != nil && !errors.Is(e.Err, context.Canceled) && !errors.Is(e.Err, context.DeadlineExceeded) {
			return slog.LevelWarn
		}
		return slog.LevelInfo
	case EventReleased, EventAlreadyDone:
		return slog.LevelInfo
	case EventReleaseFailed, EventLockLost:
		return slog.LevelError
	}
	return slog.LevelWarn // EventSemaphoreMismatch, and any kind added later
}

// Observe implements Observer.
func (s slogObserver) Observe(ctx context.Context, e Event) {
	l := s.l
	if l == nil {
		l = slog.Default()
	}
	level := slogLevel(e)
	if !l.Enabled(ctx, level) {
		return
	}
	msg := slogMessages[0]
	if int(e.Kind) < len(slogMessages) {
		msg = slogMessages[e.Kind]
	}
	var buf [6]slog.Attr
	a := append(buf[:0],
		slog.String("verb", e.Verb),
		slog.String("dialect", e.Dialect),
		slog.String("key", e.Key.String()),
	)
	if e.Namespace != "" {
		a = append(a, slog.String("namespace", e.Namespace))
	}
	switch e.Kind {
	case EventAcquired, EventNotAcquired:
		a = append(a, slog.Duration("wait", e.Wait))
	case EventReleased, EventReleaseFailed, EventLockLost:
		a = append(a, slog.Duration("held", e.Held))
	}
	if e.Err != nil {
		a = append(a, slog.Any("err", e.Err))
	}
	l.LogAttrs(ctx, level, msg, a...)
}
