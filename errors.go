package ormlock

import "github.com/ormlock/ormlock/internal/errs"

// ErrNotAcquired is returned when the lock is held by another holder and could
// not be taken: at once in the default try-once mode, or within the wait set by
// [WithWait]. The callback is not called. When the caller's context ended the
// wait, the returned error also matches the context's error
// (context.DeadlineExceeded or context.Canceled) with errors.Is.
var ErrNotAcquired = errs.ErrNotAcquired

// ErrLockLost is returned when a lock held by a Session was lost while the
// callback ran: the lock connection was killed, the server restarted or failed
// over, or a keepalive failed. The callback's context is cancelled with this
// error as its cause (see context.Cause).
var ErrLockLost = errs.ErrLockLost

// ErrCommitUnknown is returned when a COMMIT was sent but no answer came
// back: the connection broke under it, or the caller's context ended and
// the COMMIT was cut short. The transaction may or may not have committed;
// check the data before doing its work again. The error also matches the
// cause (ErrLockLost when the lock's connection broke, the context's error
// when it ended). A COMMIT known not to have been sent is not reported so.
var ErrCommitUnknown = errs.ErrCommitUnknown

// ErrAlreadyDone is returned when RunOnce finds that the (job, slot) already
// has a committed run in the ledger; the callback is not called.
var ErrAlreadyDone = errs.ErrAlreadyDone

// ErrUnsupportedDialect is returned when the database is neither PostgreSQL
// nor MySQL/MariaDB (for example SQLite), at plugin registration or at the
// first call of a verb; and, before fn runs, when the server accepts the lock
// functions but its locks would exclude nobody: a PostgreSQL hot standby,
// CockroachDB before v26.3, a MySQL/MariaDB replica (read_only or
// innodb_read_only), a Galera node, a multi-primary Group Replication member.
// That check costs one query on a pool's first call; see
// docs/COMPATIBILITY.md. Also for a lock in the caller's own transaction on
// MySQL/MariaDB (sqllock.Lock, gormlock's nested call), whose named lock
// would outlive that transaction.
var ErrUnsupportedDialect = errs.ErrUnsupportedDialect

// ErrInvalidKey is returned when a lock key is unusable: an empty name, or a
// name that is not valid UTF-8 or contains a NUL byte; or a lock shape that
// cannot be taken: an empty [All], one of more than 64 keys or two of whose
// keys resolve to one server lock, a [Semaphore] whose n is not 1 to 128,
// a Semaphore inside All or Shared.
var ErrInvalidKey = errs.ErrInvalidKey

// ErrInvalidArgument is returned when an argument is unusable: a nil
// database or callback, a negative duration, an invalid ledger table name,
// or a valid key with a verb or option it does not combine with (a lock
// shape with Lead, WithFencing or Holder of a set or a semaphore: see
// docs/PROTOCOL.md, Lock shapes), or a lock in the caller's own transaction
// above READ COMMITTED or with an option it cannot honour there
// (sqllock.Lock, pgxlock.Lock: docs/PROTOCOL.md, Nested calls). The error
// text names the argument.
var ErrInvalidArgument = errs.ErrInvalidArgument

// ErrImplicitCommit is returned when fn failed after MySQL/MariaDB had
// committed its transaction implicitly: the server commits the open
// transaction before a DDL statement (CREATE, ALTER, DROP, TRUNCATE, ...),
// so the rollback after fn's error undid nothing fn wrote before that
// statement, and a transactional RunOnce records the run 'failed'. The
// error also matches fn's own. A fn that returns nil after an implicit
// commit succeeds (its writes are committed, though not as one
// transaction) and a warning is logged on slog.Default(). Run a job that
// needs DDL with [WithClaim], outside one transaction. See
// docs/PROTOCOL.md (Deadlines, MySQL/MariaDB: DDL inside fn).
var ErrImplicitCommit = errs.ErrImplicitCommit

// PanicError is the error a [Hook]'s End receives, as its Event's Err,
// when fn panicked or called runtime.Goexit (testing's t.FailNow does):
// End runs once on every path out of a verb, after the rollback and the
// release. Value is the panic's value (nil for runtime.Goexit, where
// Goexit is true); a panic raised by anything else the verb ran (a
// driver, an ORM callback) is reported so too. No verb returns it: the
// panic itself continues to the caller unchanged, its value the one fn
// raised, and runtime.Goexit goes on ending the goroutine. Match it with
// errors.As. (Under GODEBUG=panicnil=1 a panic(nil) cannot be told from
// runtime.Goexit and is reported as one.) Its Error method (on
// *PanicError) reads "ormlock: fn panicked: " and the value, or "ormlock:
// fn called runtime.Goexit". It is defined once, in internal/errs, and
// named here:
//
//	type PanicError struct {
//		// Value is the value the panic was raised with, as recover returned
//		// it; nil for runtime.Goexit.
//		Value any
//		// Goexit is true when fn called runtime.Goexit (testing's t.FailNow,
//		// say) rather than panicking.
//		Goexit bool
//	}
type PanicError = errs.PanicError

// ErrPaused is returned by RunOnce and RunScheduled (and so by the
// scheduler's Locker, Task and JobWrapper) for a slot of a job an operator
// paused ([Pause]): the slot is recorded 'skipped' in the ledger with the
// pause's reason and is not run later, not even by catch-up after the
// job is resumed, unless an operator reruns it ([Rerun]); fn is not
// called. Every replica whose claim reaches the slot while the job is
// paused gets it, also after another replica recorded the slot skipped (a
// replica that finds the slot's lock held gets [ErrNotAcquired], as for any
// slot). A slot already done answers [ErrAlreadyDone] as before, and so
// does a skipped slot of a job that is not paused. See docs/OPERATIONS.md.
var ErrPaused = errs.ErrPaused
