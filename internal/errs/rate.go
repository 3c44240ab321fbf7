package errs

import (
	"fmt"
	"time"
)

// RateRefused is the cause a refused rate limit (ormlock.Rate) wraps under
// ErrNotAcquired: when its next token is due, as far as the server could
// tell. ormlock.RetryAfter reads it.
type RateRefused struct {
	// N is the limit's n; Open is how many of its tokens transactions
	// still open hold (as far as the server showed: they may roll back).
	N, Open int
	// Due is when the first token in use by a committed transaction is
	// free again, by the server's clock, and After how long after the
	// refusal that is; zero when every token is held by an open
	// transaction (one is then free at the latest Per after now).
	Due   time.Time
	After time.Duration
	// Per is the limit's interval.
	Per time.Duration
}

func (r *RateRefused) Error() string {
	s := fmt.Sprintf("all %d tokens are in use", r.N)
	switch {
	case !r.Due.IsZero() && r.Open > 0:
		s += fmt.Sprintf("; the next is due at %s by the server's clock (in %v), sooner if one of the %d held by transactions still open is given back by a rollback",
			r.Due.UTC().Format(time.RFC3339Nano), r.After, r.Open)
	case !r.Due.IsZero():
		s += fmt.Sprintf("; the next is due at %s by the server's clock (in %v)", r.Due.UTC().Format(time.RFC3339Nano), r.After)
	default:
		s += fmt.Sprintf("; all %d are held by transactions still open: one is free when one of them rolls back, or at the latest %v after it was taken", r.Open, r.Per)
	}
	return s
}
