package errs

import "errors"

// The root package's sentinels, defined here, at the bottom of the import
// graph, so that every internal package returns the very values that
// package ormlock documents and names (ormlock.ErrNotAcquired is
// ErrNotAcquired): errors.Is matches across packages and no internal
// package imports the root. Their documentation is on the root's names.
// The adapters' own sentinels (gormlock.ErrNestedTransaction,
// entlock.ErrNotWrapped, scheduler.ErrNotLeader) stay in their packages.
var (
	// ErrNotAcquired is ormlock.ErrNotAcquired.
	ErrNotAcquired = errors.New("ormlock: lock not acquired")
	// ErrLockLost is ormlock.ErrLockLost.
	ErrLockLost = errors.New("ormlock: lock lost")
	// ErrCommitUnknown is ormlock.ErrCommitUnknown.
	ErrCommitUnknown = errors.New("ormlock: commit outcome unknown: the transaction may or may not have committed")
	// ErrAlreadyDone is ormlock.ErrAlreadyDone.
	ErrAlreadyDone = errors.New("ormlock: job already done for this slot")
	// ErrUnsupportedDialect is ormlock.ErrUnsupportedDialect.
	ErrUnsupportedDialect = errors.New("ormlock: unsupported dialect")
	// ErrInvalidArgument is ormlock.ErrInvalidArgument.
	ErrInvalidArgument = errors.New("ormlock: invalid argument")
	// ErrInvalidKey is ormlock.ErrInvalidKey.
	ErrInvalidKey = errors.New("ormlock: invalid key")
	// ErrStaleToken is ormlock.ErrStaleToken.
	ErrStaleToken = errors.New("ormlock: stale fencing token")
	// ErrPaused is ormlock.ErrPaused.
	ErrPaused = errors.New("ormlock: job paused")
	// ErrImplicitCommit is ormlock.ErrImplicitCommit (and
	// lockproto.ErrImplicitCommit, which the protocol wraps).
	ErrImplicitCommit = errors.New("ormlock: the transaction was committed implicitly while fn ran (MySQL/MariaDB commits before a DDL statement such as CREATE TABLE or TRUNCATE): fn's writes before it stay committed and were not rolled back; run a job that needs DDL with ormlock.WithClaim, outside one transaction")
)
