package conformance_test

import (
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/gormlock"
)

// The adapters re-export ormlock's sentinels under their own names; each
// must be the very value, so that errors.Is works with either name and a
// switch on err == gormlock.ErrNotAcquired matches ormlock's.
func TestSentinelsAreOrmlocks(t *testing.T) {
	for name, pair := range map[string][3]error{
		"ErrNotAcquired":        {ormlock.ErrNotAcquired, gormlock.ErrNotAcquired, entlock.ErrNotAcquired},
		"ErrLockLost":           {ormlock.ErrLockLost, gormlock.ErrLockLost, entlock.ErrLockLost},
		"ErrAlreadyDone":        {ormlock.ErrAlreadyDone, gormlock.ErrAlreadyDone, entlock.ErrAlreadyDone},
		"ErrUnsupportedDialect": {ormlock.ErrUnsupportedDialect, gormlock.ErrUnsupportedDialect, entlock.ErrUnsupportedDialect},
		"ErrInvalidKey":         {ormlock.ErrInvalidKey, gormlock.ErrInvalidKey, entlock.ErrInvalidKey},
		"ErrInvalidArgument":    {ormlock.ErrInvalidArgument, gormlock.ErrInvalidArgument, entlock.ErrInvalidArgument},
	} {
		if pair[0] != pair[1] || pair[0] != pair[2] {
			t.Errorf("%s: ormlock %p, gormlock %p, entlock %p", name, pair[0], pair[1], pair[2])
		}
	}
}
