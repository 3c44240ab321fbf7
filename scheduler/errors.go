package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ormlock/ormlock"
)

// schedError is an error with the scheduler's context in front, keeping
// "ormlock: " once at the head of the message: "ormlock: scheduler: job
// "x", slot ...: lock not acquired: ...". errors.Is and errors.As see
// the error it wraps.
type schedError struct {
	context string
	err     error
}

func (e *schedError) Error() string {
	return "ormlock: scheduler: " + e.context + ": " + strings.TrimPrefix(e.err.Error(), "ormlock: ")
}

func (e *schedError) Unwrap() error { return e.err }

// wrapf returns err with the context format/args in front.
func wrapf(err error, format string, args ...any) error {
	return &schedError{context: fmt.Sprintf(format, args...), err: err}
}

// ended returns nil while ctx is live; once it has ended, the skip of a
// call that sends nothing: an error wrapping ormlock.ErrNotAcquired, the
// context's error and its cause (when that is another error).
func ended(ctx context.Context) error {
	err := ctx.Err()
	if err == nil {
		return nil
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, err) {
		return fmt.Errorf("%w: %w (%w)", ormlock.ErrNotAcquired, err, cause)
	}
	return fmt.Errorf("%w: %w", ormlock.ErrNotAcquired, err)
}
