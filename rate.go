package ormlock

import (
	"errors"
	"time"

	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/status"
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

// RateUsage is what the rate table shows of a [Rate]'s tokens, as each
// adapter's Usage reads it (one read, no lock taken):
//
//	type RateUsage struct {
//		N   int           // the limit's n
//		Per time.Duration // the limit's interval
//		// Used is how many tokens transactions that committed within the
//		// last Per took; Free is N - Used. A token held by a transaction
//		// still open shows as it was before it was taken (no server lists
//		// row locks cheaply): Free may count it.
//		Used, Free int
//		// NextFree is when the first used token is free again, by the
//		// database server's clock (zero when none is used); Now is that
//		// clock when it was read.
//		NextFree, Now time.Time
//	}
//
// It is defined once, in internal/status, and named here.
type RateUsage = status.RateUsage
