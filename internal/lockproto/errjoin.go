package lockproto

import "fmt"

// Join returns an error that matches both a and b with errors.Is and
// errors.As, on one line ("a; b"), unlike errors.Join, whose newline breaks
// a log line in two. A nil side is dropped; Join(nil, nil) is nil.
func Join(a, b error) error {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return fmt.Errorf("%w; %w", a, b)
}
