// Package entlock takes ormlock's distributed locks inside ent's own
// transactions: PostgreSQL advisory locks and MySQL/MariaDB named locks.
//
// ent generates its client per project, so this package cannot name your
// *ent.Tx. It works through a driver wrapper instead, and generic helpers
// that infer the transaction type from your client:
//
//	drv := entlock.Wrap(entsql.OpenDB(dialect.Postgres, db))
//	client := ent.NewClient(ent.Driver(drv))
//
//	err := entlock.Transaction(ctx, client, "daily-settlement", func(tx *ent.Tx) error {
//		return tx.Settlement.Create().SetDay(day).Exec(ctx)
//	})
//	switch {
//	case errors.Is(err, ormlock.ErrNotAcquired):
//		// another replica holds the lock: nothing to do
//	case err != nil:
//		return err
//	}
//
// No code generation feature is needed, and both dialects are supported.
//
// # The wrapper
//
// [Wrap] returns a [Driver] that passes everything ent does (queries,
// client.Tx, client.BeginTx, migrations, Close) to the wrapped driver
// unchanged. The verbs reach it through the context of client.Tx: the
// generated client hands its context to its driver, and the wrapper then
// starts the transaction with the lock held. If the client's driver is not
// wrapped, the verbs return [ErrNotWrapped] and never run fn unlocked.
// A driver of another dialect (sqlite3, ...) or one without a *sql.DB makes
// the verbs return [ormlock.ErrUnsupportedDialect]; [Driver.Err] reports it
// at start-up. Options given to Wrap are the defaults of every verb called
// through that driver, like the GORM plugin's.
//
// # Transaction
//
// [Transaction] runs fn inside one ent transaction while the lock is held.
// By default it tries once; [ormlock.WithWait] waits up to a duration.
//
// On PostgreSQL the transaction begins on a connection from the pool and the
// lock is pg_try_advisory_xact_lock (or, with a wait, pg_advisory_xact_lock
// under a SET LOCAL lock_timeout) inside it. COMMIT or ROLLBACK releases it,
// so it cannot leak, and it is correct behind PgBouncer in transaction
// pooling mode. With pgx BEGIN and the lock travel in one message, so a
// locked transaction makes the round trips of an unlocked one; other
// drivers send them apart. See docs/PROTOCOL.md, Round trips.
//
// On MySQL/MariaDB a connection is pinned, GET_LOCK runs on it, and the
// transaction begins on that same connection. When ent's transaction ends,
// RELEASE_LOCK runs after the COMMIT (so no other instance starts before
// this one's writes are visible), on every path including errors, panics and
// a cancelled context. When the release fails or does not return 1, the
// connection is destroyed rather than returned to the pool, and the server
// frees the lock with it.
//
// fn's error is returned unchanged; a panic rolls back, releases and
// re-panics. The lock is held until fn returns, on both dialects: when ctx
// ends while fn runs, fn's statements fail with ctx's error, and the
// transaction is rolled back (not committed) after fn returns; it is not
// rolled back behind fn's back, which on PostgreSQL would drop the lock
// while fn still works.
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
// refused with [ormlock.ErrInvalidArgument] before fn runs. READ COMMITTED (the default) keeps
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
// ent has no nested transactions, and a transaction cannot be found from a
// context, so a call inside fn is never nested in the outer transaction:
//
//   - On the transactional client (tx.Client()), ent refuses to start a
//     transaction; Transaction returns an error wrapping ent's
//     "cannot start a transaction within a transaction" and does not call
//     fn.
//   - On the plain client, it is a new, independent transaction on another
//     connection. It commits or rolls back on its own: the outer
//     transaction's rollback does not undo it. Locks are per connection, so
//     the same key is not re-entrant: the inner call returns ErrNotAcquired
//     at once (try-once), or after its whole wait (WithWait), because the
//     outer holder waits for it. A different key works. The inner call needs
//     a second connection: with a pool of MaxOpenConns 1 it blocks until ctx
//     ends, so give ctx a deadline if the pool may be exhausted.
//
// # Session
//
// [Session] is for long jobs that must not run inside one long transaction:
// a dedicated connection holds the lock while fn uses the normal pool, and a
// keepalive cancels fn's context with cause [ormlock.ErrLockLost] when the
// lock connection is lost. It accepts the client or the *Driver.
//
// # RunOnce
//
// [RunOnce] runs a job at most once per (job, slot) across every instance,
// with an audit trail in a ledger table created by [Migrate] (name from
// [ormlock.WithLedgerTable], default "ormlock_runs") and read by [Runs]. It
// is gormlock.RunOnce for ent, on the same lock ([ormlock.RunKey]) and the
// same table, so services on either ORM share a job's runs. The slot is the
// scheduled time, never the wall clock of whoever came first: map a trigger
// time to it with an [ormlock.Schedule] ([ormlock.Every] or [ormlock.Cron]).
// A slot that already ran returns [ormlock.ErrAlreadyDone]. A run is
// identified by (namespace, job, slot): under different namespaces
// ([ormlock.WithNamespace]) the same job name is two jobs, in the lock and in
// the ledger (docs/PROTOCOL.md).
//
//	err := entlock.RunOnce(ctx, client, "daily-settlement", slot, func(tx *ent.Tx) error {
//		return tx.Settlement.Create().SetDay(slot).Exec(ctx)
//	})
//
// By default the lock, the ledger row and fn's work share one ent
// transaction: they commit together, and a failed fn leaves no row behind.
//
// Claim mode ([ormlock.WithClaim]) is for long jobs: the lock is held as
// [Session] holds it, a 'running' row is committed before fn starts, and the
// row is marked 'done' or 'failed' (with fn's error) after it. Where
// gormlock hands fn a plain, non-transactional *gorm.DB in this mode, an
// *ent.Tx has to be a transaction, so fn gets an ordinary one of its own:
// not the lock's, not the ledger's, begun at fn's first statement on it (a
// job that does not use it holds no transaction open), committed when fn
// returns nil and before the row is marked done, rolled back when fn fails.
// It is bound to the lock's session, so losing the lock rolls it back rather
// than committing work another instance may be redoing. Keep in tx only
// what should commit as one unit; work done through the plain client inside
// fn commits as it goes, as in gormlock.
//
// # Who holds a lock
//
// [Holder] reports the connection that holds a lock (PostgreSQL backend pid,
// MySQL/MariaDB connection id, user, client address, state, last query):
// the answer to "why didn't my job run?".
package entlock
