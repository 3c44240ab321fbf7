// Package errs builds ormlock's error messages so that "ormlock: " stands
// once, at the head, however many layers an error passes through: a layer
// adds its context with Wrap, which drops the prefix of the error it wraps,
// and joins two errors on one line with Join.
package errs

import (
	"fmt"
	"strings"
)

// Prefix starts every error message ormlock makes.
const Prefix = "ormlock: "

// wrapped is an error with context in front of the error it wraps.
type wrapped struct {
	msg string // Prefix + the context
	err error
}

func (w *wrapped) Error() string { return w.msg + ": " + Trim(w.err.Error()) }

func (w *wrapped) Unwrap() error { return w.err }

// Wrap returns err with the context format/args in front:
// "ormlock: <context>: <err without its own prefix>". errors.Is and
// errors.As see err through it. Wrap(nil, ...) is nil.
func Wrap(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return &wrapped{msg: Prefix + fmt.Sprintf(format, args...), err: hinted(err)}
}

// Trim returns msg without a leading "ormlock: ".
func Trim(msg string) string { return strings.TrimPrefix(msg, Prefix) }

// Join returns an error that matches both a and b with errors.Is and
// errors.As, on one line ("a; b" with b's prefix dropped), unlike
// errors.Join, whose newline breaks a log line in two. A nil side is
// dropped; Join(nil, nil) is nil.
func Join(a, b error) error {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return joined{a, b}
}

type joined [2]error

func (j joined) Error() string { return j[0].Error() + "; " + Trim(j[1].Error()) }

func (j joined) Unwrap() []error { return j[:] }
