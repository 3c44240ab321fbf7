package lockproto_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
)

// TestHoldingRefusesShapes: what a verb declares of its use of a lock
// (lockproto.Holding), not its name, decides which lock shapes NewOpHeld
// refuses, with the texts the verbs have always returned.
func TestHoldingRefusesShapes(t *testing.T) {
	set := keys.Key(ormlock.All("a", "b"))
	shared := keys.Key(ormlock.Shared("a"))
	for _, c := range []struct {
		verb    string
		hold    lockproto.Holding
		k       keys.Key
		refused string // "" when allowed
	}{
		{"Lead", lockproto.HeldForLead, set, "Lead of " + set.String() + ": Lead takes one exclusive key, not a lock shape"},
		{"Lead", lockproto.HeldForLead, shared, "Lead takes one exclusive key"},
		{"Holder", lockproto.HeldForHolder, set, "Holder of " + set.String() + ": a set or a semaphore has several holders; use Holders"},
		{"Holder", lockproto.HeldForHolder, keys.Key(ormlock.Semaphore("a", 2)), "several holders"},
		{"Session", lockproto.HeldForSession, set, ""},
		{"Holders", lockproto.HeldForTx, set, ""},
		{"Transaction", lockproto.HeldForTx, set, ""},
		// the name alone refuses nothing
		{"Lead", lockproto.HeldForTx, set, ""},
	} {
		for _, d := range []lockproto.Dialect{lockproto.Postgres, lockproto.MySQL} {
			_, err := lockproto.NewOpHeld(d, c.verb, c.k, config.New(), c.hold)
			switch {
			case c.refused == "" && err != nil:
				t.Errorf("%s %v of %s on %v: %v, want nil", c.verb, c.hold, c.k.String(), d, err)
			case c.refused != "" && (!errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), c.refused)):
				t.Errorf("%s %v of %s on %v: %v, want ErrInvalidArgument saying %q", c.verb, c.hold, c.k.String(), d, err, c.refused)
			}
		}
	}
}
