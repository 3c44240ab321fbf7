package errs

import "errors"

// The sentinels that internal packages wrap. Package ormlock documents them
// and names them (ormlock.ErrInvalidArgument is ErrInvalidArgument, the same
// value), so errors.Is matches across packages.
var (
	// ErrInvalidArgument is ormlock.ErrInvalidArgument.
	ErrInvalidArgument = errors.New("ormlock: invalid argument")
	// ErrInvalidKey is ormlock.ErrInvalidKey.
	ErrInvalidKey = errors.New("ormlock: invalid key")
)
