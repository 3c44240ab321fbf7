// Package gormlock takes ormlock's distributed locks inside GORM's own
// transactions: PostgreSQL advisory locks and MySQL/MariaDB named locks.
//
//	err := gormlock.Transaction(db.WithContext(ctx), "daily-settlement", func(tx *gorm.DB) error {
//		return tx.Create(&Settlement{Day: day}).Error
//	})
//	switch {
//	case errors.Is(err, ormlock.ErrNotAcquired):
//		// another replica holds the lock: nothing to do
//	case err != nil:
//		return err
//	}
//
// # Transaction
//
// [Transaction] runs fn inside one GORM transaction while the lock is held.
// By default it tries once; [ormlock.WithWait] waits up to a duration.
//
// On PostgreSQL the lock is pg_try_advisory_xact_lock (or, with a wait,
// pg_advisory_xact_lock under a SET LOCAL lock_timeout) taken inside GORM's
// transaction. COMMIT or ROLLBACK releases it, so it cannot leak, and it is
// correct behind PgBouncer in transaction pooling mode. With pgx (the
// driver of gorm.io/driver/postgres) BEGIN and the lock travel in one
// message, so a locked transaction makes the round trips of an unlocked
// one; fn's session then runs on the pinned connection (its ConnPool is a
// transaction, not a *sql.Tx). With PrepareStmt or another driver, BEGIN
// and the lock are sent apart. See docs/PROTOCOL.md, Round trips.
//
// On MySQL/MariaDB the lock is GET_LOCK on one pinned connection; the
// transaction begins on that same connection, and RELEASE_LOCK runs after
// COMMIT (so no other instance starts before this one's writes are visible),
// on every path including errors, panics and a cancelled context. When the
// release fails or does not return 1, the connection is destroyed rather than
// returned to the pool, and the server frees the lock with it.
//
// fn's error is returned unchanged; a panic rolls back, releases and
// re-panics.
//
// # Isolation levels
//
// Whatever [ormlock.WithTxOptions] asks for, fn's first read sees every
// commit of every earlier holder of the key. On PostgreSQL, REPEATABLE READ
// and SERIALIZABLE take their snapshot at the transaction's first
// statement, so there the lock is held in a READ COMMITTED transaction of its
// own on a second connection, fn's transaction begins once the lock is held,
// the lock is confirmed before COMMIT (else the error wraps
// [ormlock.ErrLockLost]) and released after it. That needs two connections
// of the pool per call: a pool of MaxOpenConns 1 is
// refused with [ormlock.ErrInvalidArgument] before fn runs, and so is a call
// nested in a transaction above READ COMMITTED (its snapshot predates the
// lock). READ COMMITTED (the default) keeps
// one connection and one transaction. MySQL/MariaDB take GET_LOCK before
// BEGIN, so every level works there as it is. See docs/PROTOCOL.md.
//
// # Deadlines
//
// Every wait of a verb ends by the context's deadline (plus at most a second
// or two for a server that stopped answering): a pool connection, BEGIN,
// the lock, COMMIT and the release. Ended before the lock: an error matching
// both [ormlock.ErrNotAcquired] and the context's error (also when the
// deadline cut a dial, or the server's statement_timeout ended the wait,
// whose error stays in the chain). Ended after: the context's error, nothing
// committed, the lock free; a COMMIT that a frozen server keeps from
// answering is cut a second after the deadline, with an unknown outcome, as
// with any client. A wait longer than PostgreSQL's
// largest lock_timeout (about 24.8 days) is clamped to it.
//
// # Cancellation while fn runs
//
// The transaction is not bound to the context's cancellation: it ends when fn
// returns (rolled back when the context ended meanwhile), so merely
// cancelling the context does not free the lock under a running fn. A
// statement of fn that is running when the context ends is another matter:
// the drivers abort it by closing the connection (go-sql-driver/mysql
// always, pgx by default), the server ends the session, and with it the lock
// (on MySQL/MariaDB the pinned connection holds it; on PostgreSQL the
// transaction does). Nothing of fn's is committed, but another instance may
// take the lock before fn returns. A fn must therefore stop at the first
// statement error or once its context is done, before doing work outside
// the database (sending mail, calling an API) that the lock protects. pgx
// users can make a cancelled statement keep the connection by setting
// pgconn.Config.BuildContextWatcherHandler to a
// pgconn.CancelRequestContextWatcherHandler.
//
// # Nested calls
//
// When db is already inside a transaction:
//
//   - PostgreSQL: the lock is taken inside a SAVEPOINT of the outer
//     transaction (GORM's nested transaction). It is held until the outer
//     transaction ends, not until fn returns. If fn fails, the savepoint is
//     rolled back, which drops the lock together with fn's work; the outer
//     transaction goes on. With DisableNestedTransaction there is no
//     savepoint and the lock stays with the outer transaction.
//   - MySQL/MariaDB: not supported. The lock would have to be released before
//     the outer transaction commits, so another instance could run before
//     this one's writes are visible. Transaction returns an error wrapping
//     [ErrNestedTransaction] without calling fn.
//
// # Session
//
// [Session] is for long jobs that must not run inside one long transaction:
// a dedicated connection holds the lock while fn uses the normal pool, and a
// keepalive cancels fn's context with cause [ormlock.ErrLockLost] when the
// lock connection is lost.
//
// # RunOnce
//
// [RunOnce] runs a job at most once per (job, slot) across every instance,
// with an audit trail in a ledger table created by [Migrate] (name from
// [ormlock.WithLedgerTable], default "ormlock_runs"). The slot is the
// scheduled time, never the wall clock of whoever came first: map a trigger
// time to it with an [ormlock.Schedule] ([ormlock.Every] or [ormlock.Cron]).
// A slot that already ran returns [ormlock.ErrAlreadyDone]; [Runs] reads the
// ledger. [ormlock.WithClaim] selects claim mode for long jobs. A run is
// identified by (namespace, job, slot): services sharing a database and a
// ledger table under different namespaces ([ormlock.WithNamespace]) run their
// own jobs of the same name; see docs/PROTOCOL.md.
//
// # Pool sizing
//
// While fn runs, [Transaction] and transactional [RunOnce] hold one
// connection of db's pool (two on PostgreSQL above READ COMMITTED, the
// second taken once the lock is held: keep one spare beyond the callers that
// may wait for the lock at once) (on MySQL/MariaDB the pinned connection that also
// holds the lock), and [Session] and claim-mode RunOnce hold their lock
// connection besides what fn (and the ledger) use. A fn that queries the
// outer db, not tx, needs one more connection. When the pool has none to
// spare (SetMaxOpenConns(1), or every connection held by callers waiting the
// same way), that query waits until the context ends: database/sql has no
// pool timeout, so with a context that never ends (GORM's default) the call
// never returns. With a deadline (db.WithContext(ctx)) it returns an error
// matching the context's error, fn's work is rolled back and the lock is
// released; a caller still waiting for its first connection gets an error
// matching both [ormlock.ErrNotAcquired] and the context's error. Give the
// pool one connection per concurrent caller, two when fn uses the outer db
// (and for Session and claim mode), and give calls a deadline. A fn that
// uses only tx cannot starve the pool: with MaxOpenConns 1, callers queue
// for the connection rather than for the lock.
//
// # Plugin and read replicas
//
// db.Use(gormlock.New(opts...)) sets defaults (namespace, wait, observer,
// ledger table) for every call on that db, and rejects an invalid option,
// or a dialect other than postgres or mysql ([ormlock.ErrUnsupportedDialect]),
// at registration. It fails closed: after a failed registration every verb
// on that db returns the registration's error and takes no lock, so an
// ignored error cannot make the locks drop their namespace.
//
// With gorm.io/plugin/dbresolver registered, the lock and the transaction
// always run on a source (primary) connection, never a replica: a lock taken
// on a replica would exclude nobody. A pool whose server is itself a replica
// (a misrouted DSN) is refused with [ormlock.ErrUnsupportedDialect] before fn
// runs, as are other servers whose locks would be fake (see
// docs/COMPATIBILITY.md); the check is one query on the pool's first call.
// PrepareStmt: true is supported; the lock
// statements themselves are never prepared, so they also work behind
// PgBouncer.
//
// # Observing locks
//
// [ormlock.WithObserver] (per call or as the plugin's default) receives an
// [ormlock.Event] for every attempt, acquisition, refusal, release, failed
// release and lost lock; [ormlock.SlogObserver] logs them. A panicking
// observer is contained and reported once (see [ormlock.Observer]). With no
// observer set no event is built, and with one the Transaction path
// allocates nothing more (BenchmarkTransactionObserver). [Holder] asks the database who holds
// a lock right now: backend pid or connection id, user, client, state, last
// query, hold time.
package gormlock
