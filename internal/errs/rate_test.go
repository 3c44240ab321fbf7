package errs_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock/internal/errs"
)

func TestRateRefusedMessage(t *testing.T) {
	due := time.Date(2026, 12, 4, 22, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		r    errs.RateRefused
		want []string
	}{
		{errs.RateRefused{N: 5, Due: due, After: 3 * time.Second, Per: time.Minute}, []string{"all 5 tokens are in use", "2026-12-04T22:00:00Z", "in 3s"}},
		{errs.RateRefused{N: 5, Open: 2, Due: due, After: time.Second, Per: time.Minute}, []string{"sooner if one of the 2 held by transactions still open is given back by a rollback"}},
		{errs.RateRefused{N: 5, Open: 5, Per: time.Minute}, []string{"all 5 are held by transactions still open", "at the latest 1m0s after it was taken"}},
	} {
		err := fmt.Errorf("%w: %q: %w", errs.ErrNotAcquired, "rate(k,5/1m0s)", &c.r)
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q lacks %q", err, w)
			}
		}
		var got *errs.RateRefused
		if !errors.Is(err, errs.ErrNotAcquired) || !errors.As(err, &got) {
			t.Errorf("%v: not ErrNotAcquired and RateRefused", err)
		}
	}
}
