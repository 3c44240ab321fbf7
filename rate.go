package ormlock

import (
	"errors"
	"time"

	"github.com/ormlock/ormlock/internal/errs"
)

// RetryAfter returns how long after err, a refusal of a [Rate] (wrapping
// [ErrNotAcquired]), its next token is due by the database server's
// clock, and true; or 0 and false when err is no such refusal, or when
// every token was held by a transaction still open (one is then free when
// one of them rolls back, or at the latest per after it was taken). A
// rollback of an open holder may free a token sooner than it says. Made
// for an HTTP 429's Retry-After.
func RetryAfter(err error) (time.Duration, bool) {
	var r *errs.RateRefused
	if !errors.As(err, &r) || r.Due.IsZero() {
		return 0, false
	}
	return max(r.After, 0), true
}
