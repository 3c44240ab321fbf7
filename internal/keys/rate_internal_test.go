package keys

import (
	"errors"
	"testing"
	"time"

	"github.com/ormlock/ormlock/internal/errs"
)

func TestRateKey(t *testing.T) {
	k := Rate(Name("emails"), 100, time.Minute)
	if err := k.Validate(); err != nil {
		t.Fatal(err)
	}
	if n, per := RateOf(k); n != 100 || per != time.Minute || !IsRate(k) || IsShape(k) || Count(k) != 0 {
		t.Errorf("RateOf = %d, %v; IsRate %v, IsShape %v, Count %d", n, per, IsRate(k), IsShape(k), Count(k))
	}
	if s := k.String(); s != "rate(emails,100/1m0s)" {
		t.Errorf("String = %q", s)
	}
	if k != Rate(Name("emails"), 100, time.Minute) || k == Rate(Name("emails"), 100, time.Hour) {
		t.Error("rate keys do not compare by key, n and per")
	}
	if Plain(k) != Name("emails") {
		t.Errorf("Plain = %v", Plain(k))
	}
	for _, bad := range []Key{
		Rate(Name("x"), 0, time.Minute),
		Rate(Name("x"), MaxRate+1, time.Minute),
		Rate(Name("x"), 1, MinRatePer-1),
		Rate(Name("x"), 1, MaxRatePer+1),
		Rate(Name(""), 1, time.Minute),
		Rate(Key{}, 1, time.Minute),
		Rate(All(Name("a"), Name("b")), 1, time.Minute),
		Rate(Shared(Name("a")), 1, time.Minute),
		Rate(Semaphore(Name("a"), 2), 1, time.Minute),
		Rate(Rate(Name("a"), 1, time.Minute), 1, time.Minute),
		All(Name("a"), Rate(Name("b"), 1, time.Minute)),
		Shared(Rate(Name("a"), 1, time.Minute)),
		Semaphore(Rate(Name("a"), 1, time.Minute), 2),
	} {
		if err := bad.Validate(); !errors.Is(err, errs.ErrInvalidKey) {
			t.Errorf("%s: Validate = %v, want ErrInvalidKey", bad, err)
		}
	}
}
