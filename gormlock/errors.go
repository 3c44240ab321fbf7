package gormlock

import (
	"errors"

	"github.com/ormlock/ormlock"
)

// Re-exported sentinels: each is the very value in package ormlock, so
// errors.Is works with either name.
var (
	ErrNotAcquired        = ormlock.ErrNotAcquired
	ErrLockLost           = ormlock.ErrLockLost
	ErrAlreadyDone        = ormlock.ErrAlreadyDone
	ErrUnsupportedDialect = ormlock.ErrUnsupportedDialect
	ErrInvalidKey         = ormlock.ErrInvalidKey
	ErrInvalidArgument    = ormlock.ErrInvalidArgument
)

// ErrNestedTransaction is returned when Transaction (or RunOnce) is called on
// MySQL/MariaDB with a db that is already inside a transaction: the named lock
// would have to be released before the outer transaction commits, so the
// guarantee could not be kept. fn is not called.
var ErrNestedTransaction = errors.New("ormlock: nested transaction not supported on mysql")
