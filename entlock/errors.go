package entlock

import (
	"fmt"

	"github.com/ormlock/ormlock"
)

// ErrNotWrapped is returned when a verb is given an ent client whose driver
// is not an entlock [Driver] (the client was not built with
// ent.Driver(entlock.Wrap(drv))), so no lock could be taken. fn is not
// called, and the transaction ent opened for the attempt is rolled back. It
// wraps [ormlock.ErrInvalidArgument].
var ErrNotWrapped = fmt.Errorf("%w: the ent client's driver is not wrapped with entlock.Wrap", ormlock.ErrInvalidArgument)
