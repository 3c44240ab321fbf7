package scheduler

import (
	"fmt"
	"strings"
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
