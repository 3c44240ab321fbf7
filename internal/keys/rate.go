package keys

import (
	"fmt"
	"strconv"
	"time"

	"github.com/ormlock/ormlock/internal/errs"
)

// Rate limits (ormlock.Rate): a one-key Key with rate > 0 and per > 0. It
// is not a lock shape (IsShape is false): it takes no server lock, but a
// token row of the rate table in fn's transaction (lockproto's rate.go).
// A Rate of a shape, and a shape of a Rate, is a kindBad key whose
// Validate says why.

// Caps on a rate limit, documented on ormlock.Rate.
const (
	// MaxRate is the largest n of ormlock.Rate: the key keeps n token
	// rows, and a take reads at most the rows of the tokens in use.
	MaxRate = 10000
	// MinRatePer and MaxRatePer bound per: a limit finer than a second
	// is not what a database round trip can keep, and a token held for
	// more than a week is a quota, not a rate.
	MinRatePer = time.Second
	MaxRatePer = 7 * 24 * time.Hour
)

// Rate returns the key of at most n acquisitions of k per per
// (ormlock.Rate).
func Rate(k Key, n int, per time.Duration) Key {
	switch {
	case k.kind == kindBad:
		return k
	case k.kind == kindAll || k.shared || k.n != 0 || k.rate != 0:
		return bad("Rate takes one plain key, not " + k.String())
	case n < 1:
		return bad("Rate of " + k.base() + ": n is " + strconv.Itoa(n) + ", at least 1 is needed")
	case n > MaxRate:
		return bad("Rate of " + k.base() + ": n is " + strconv.Itoa(n) + ", at most " + strconv.Itoa(MaxRate) + " are accepted")
	case per < MinRatePer:
		return bad("Rate of " + k.base() + ": per is " + per.String() + ", at least " + MinRatePer.String() + " is needed")
	case per > MaxRatePer:
		return bad("Rate of " + k.base() + ": per is " + per.String() + ", at most " + MaxRatePer.String() + " is accepted")
	}
	k.rate, k.per = int32(n), per
	return k
}

// IsRate reports whether k is a rate limit (ormlock.Rate).
func IsRate(k Key) bool { return k.rate != 0 }

// RateOf returns n and per of a rate limit, (0, 0) for any other key.
func RateOf(k Key) (n int, per time.Duration) { return int(k.rate), k.per }

func (k Key) validateRate() error {
	if err := Plain(k).Validate(); err != nil {
		return fmt.Errorf("Rate: %w", err)
	}
	if k.kind == kindBad {
		return fmt.Errorf("%w: %s", errs.ErrInvalidKey, k.name)
	}
	return nil
}

// rateString is String of a rate limit: "rate(K,N/PER)".
func (k Key) rateString() string {
	return "rate(" + bounded(Plain(k).base(), maxShapeString-40) + "," + strconv.Itoa(int(k.rate)) + "/" + k.per.String() + ")"
}
