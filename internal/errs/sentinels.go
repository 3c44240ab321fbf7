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
	// ErrImplicitCommit is ormlock.ErrImplicitCommit (and
	// lockproto.ErrImplicitCommit, which the protocol wraps).
	ErrImplicitCommit = errors.New("ormlock: the transaction was committed implicitly while fn ran (MySQL/MariaDB commits before a DDL statement such as CREATE TABLE or TRUNCATE): fn's writes before it stay committed and were not rolled back; run a job that needs DDL with ormlock.WithClaim, outside one transaction")
)
