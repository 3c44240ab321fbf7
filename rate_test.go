package ormlock_test

import (
	"errors"
	"testing"

	"github.com/ormlock/ormlock"
)

func TestRetryAfterOfOtherErrors(t *testing.T) {
	for _, err := range []error{nil, ormlock.ErrNotAcquired, errors.New("x")} {
		if d, ok := ormlock.RetryAfter(err); ok || d != 0 {
			t.Errorf("RetryAfter(%v) = %v, %v; want 0, false", err, d, ok)
		}
	}
}
