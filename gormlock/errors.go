package gormlock

import "errors"

// ErrNestedTransaction is returned when Transaction (or RunOnce) is called on
// MySQL/MariaDB with a db that is already inside a transaction: the named lock
// would have to be released before the outer transaction commits, so the
// guarantee could not be kept. fn is not called. The error also matches
// [ormlock.ErrUnsupportedDialect], as sqllock.Lock's refusal on
// MySQL/MariaDB does.
var ErrNestedTransaction = errors.New("ormlock: nested transaction not supported on mysql")
