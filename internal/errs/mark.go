package errs

import "fmt"

// marked is an error that matches a sentinel and wraps the error that
// caused it.
type marked struct {
	sentinel error
	msg      string // the context, without the prefix
	err      error
}

func (m *marked) Error() string {
	s := m.sentinel.Error()
	if m.msg != "" {
		s += ": " + m.msg
	}
	if m.err != nil {
		s += ": " + Trim(m.err.Error())
	}
	return s
}

func (m *marked) Unwrap() []error {
	if m.err == nil {
		return []error{m.sentinel}
	}
	return []error{m.sentinel, m.err}
}

// Mark returns an error that matches sentinel (whose text, "ormlock: ...",
// heads the message) and err, with the context format/args between them:
// "<sentinel>: <context>: <err without its own prefix>". It is how a
// sentinel wraps a cause that already says "ormlock: " (fmt.Errorf("%w:
// %w") would say it twice). err may be nil.
func Mark(sentinel, err error, format string, args ...any) error {
	return &marked{sentinel: sentinel, msg: fmt.Sprintf(format, args...), err: hinted(err)}
}
