// Package sqllock takes ormlock's distributed locks on a plain *sql.DB
// (PostgreSQL advisory locks, MySQL/MariaDB named locks), for programs on
// database/sql, sqlc, sqlx or bun: the same locks, keys, ledger and
// fencing tokens as gormlock and entlock, so a key excludes across all of
// them.
//
//	err := sqllock.Transaction(ctx, db, "daily-settlement", func(ctx context.Context, tx *sql.Tx) error {
//		_, err := tx.ExecContext(ctx, "INSERT INTO settlements (day) VALUES ($1)", day)
//		return err
//	})
//	switch {
//	case errors.Is(err, ormlock.ErrNotAcquired):
//		// another replica holds the lock: nothing to do
//	case err != nil:
//		return err
//	}
//
// The verbs: [Transaction] runs fn in one transaction while the lock is
// held; [Lock] takes it in a transaction you began (see below); [Session] holds the lock on a dedicated connection while a long fn
// uses the pool; [Lead] elects one leader per key among the replicas that
// call it and runs fn on the leader until leadership is lost, then
// campaigns again; [RunOnce] runs a job at most once per (job, slot) with a
// ledger ([Migrate], [Runs], [Prune], [RunScheduled]), shared with the
// other adapters; [Holder] says who holds a lock. Options go with each
// call: there is no plugin to hold defaults. fn's ctx carries the fencing
// token ([ormlock.FencingToken], with [ormlock.WithFencing]); a Session's,
// a Lead's and a claimed RunOnce's ctx ends with cause [ormlock.ErrLockLost]
// when the lock is lost.
//
// # sqlx and bun
//
// Both keep a *sql.DB: pass it, and use the library's helpers on the
// *sql.Tx fn gets. sqlx (sqlx.DB embeds *sql.DB):
//
//	err := sqllock.Transaction(ctx, xdb.DB, "dispatch", func(ctx context.Context, tx *sql.Tx) error {
//		rows, err := tx.QueryContext(ctx, xdb.Rebind("SELECT * FROM jobs WHERE state = ?"), "ready")
//		if err != nil {
//			return err
//		}
//		var jobs []Job
//		return sqlx.StructScan(rows, &jobs) // sqlx's mapping on the locked transaction's rows
//	})
//
// bun (bun.DB embeds *sql.DB):
//
//	err := sqllock.Transaction(ctx, bdb.DB, "rebuild-index", func(ctx context.Context, tx *sql.Tx) error {
//		_, err := bdb.NewInsert().Conn(tx).Model(&row).Exec(ctx) // bun's query builder on tx
//		return err
//	})
//
// # A lock in your transaction
//
// [Lock] takes the lock in a transaction you began and end yourself: bun's
// RunInTx, the *sql.Tx that sqlc's WithTx runs on, a plain db.BeginTx. It
// is PostgreSQL's transaction-level lock, held until that transaction
// commits or rolls back; nothing else releases it (bun.Tx embeds the
// *sql.Tx):
//
//	err := bdb.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
//		if err := sqllock.Lock(ctx, tx.Tx, "settle-"+day); err != nil {
//			return err // ormlock.ErrNotAcquired: another replica settles it
//		}
//		_, err := tx.NewInsert().Model(&settlement).Exec(ctx)
//		return err
//	})
//
// The lock is taken in a savepoint, released once it is held:
// [ormlock.ErrNotAcquired] (the lock held, or a [ormlock.WithWait] that
// ran out, which aborts what it ran in) rolls back to it and leaves your
// transaction as it was, free to go on; so does a refused [ormlock.All]
// or any other failure but that of the connection (a context cancelled
// during the lock statement makes pgx's driver close it). The rules:
//
//   - READ COMMITTED only (PostgreSQL's default): above it the
//     transaction's snapshot predates the lock, so its reads could miss
//     what the lock's earlier holders committed; Lock returns
//     [ormlock.ErrInvalidArgument] (use [Transaction], which handles any
//     level).
//   - MySQL/MariaDB: a named lock belongs to the connection and outlives
//     the transaction, so Lock returns [ormlock.ErrUnsupportedDialect] (use
//     [Transaction]). The dialect is told by the server's answer to Lock's
//     first statement, PostgreSQL's, which a MySQL server refuses without
//     ending the transaction.
//   - [ormlock.WithFencing] (a token is committed on a connection of its
//     own, which Lock, given only tx, does not have), [ormlock.WithTxOptions],
//     [ormlock.WithClaim] and [ormlock.WithCatchUp]:
//     [ormlock.ErrInvalidArgument].
//   - Its events are attempt, then acquired or not_acquired, with Verb
//     "Lock"; the release comes with your COMMIT or ROLLBACK, which ormlock
//     does not see, so no released event follows (a hook's End gets the
//     acquired event).
//
// Round trips: four (a statement that checks the server, as the other verbs
// do once per pool, and reads the transaction's isolation; SAVEPOINT; the
// lock; RELEASE SAVEPOINT); a set or a semaphore sends one lock statement
// per key it tries, a wait one more per key (lock_timeout is set first).
// It works behind PgBouncer in transaction mode: the lock is the
// transaction's.
//
// # The driver
//
// The dialect comes from the driver's type: pgx's stdlib, lib/pq and
// go-sql-driver/mysql are known (looked at by name, never imported: your
// program links only the driver it uses). A driver that hides its type (a
// wrapper such as otelsql or sqlhooks) is recognised by asking its server
// once per pool (SELECT version()); anything else gives
// [ormlock.ErrUnsupportedDialect] naming the driver. Fake locks (a
// PostgreSQL standby, Galera, a read-only MySQL replica) are refused as by
// the other adapters (docs/COMPATIBILITY.md). The MySQL driver's DSN
// settings parseTime, loc, clientFoundRows and interpolateParams may be
// anything.
//
// # The cost of database/sql's BEGIN
//
// fn gets a real *sql.Tx, which only database/sql can begin: it sends BEGIN
// as a round trip of its own, and the lock follows as the transaction's
// first statement. On a pool opened the usual way (sql.Open) a locked
// Transaction therefore costs what the hand-written protocol does, one
// round trip more than a plain transaction: on PostgreSQL three (BEGIN,
// the lock, COMMIT), four with [ormlock.WithWait] (lock_timeout is set
// first), a loser three (BEGIN, the lock, ROLLBACK); on MySQL/MariaDB
// GET_LOCK and RELEASE_LOCK around the transaction (docs/PROTOCOL.md,
// Round trips). gormlock, entlock and pgxlock on pgx send BEGIN and the
// lock in one message instead.
//
// # Two round trips: Open, OpenDB, Wrap
//
// A pool opened by [Open] (or [OpenDB], on a connector wrapped by [Wrap])
// closes the gap on PostgreSQL with pgx's driver: database/sql's own BEGIN,
// the one that begins fn's *sql.Tx, travels in one message with the lock,
// so a Transaction costs the round trips of a plain transaction, two
// (BEGIN with the lock, COMMIT; a loser BEGIN with the lock, ROLLBACK;
// [ormlock.WithWait] too), directly and behind PgBouncer:
//
//	db, err := sqllock.Open("pgx", dsn) // in place of sql.Open("pgx", dsn)
//
// It is opt-in because it changes how the pool's connections begin a
// transaction that ormlock asks for: the wrapper sends that BEGIN (with
// the lock) itself and ends the transaction with COMMIT or ROLLBACK on the
// same connection, the way pgx's driver does, and a connection the server
// does not report idle afterwards is closed, never pooled. Every other use
// of the pool, its BeginTx included, is the driver's own and unchanged:
// the pool is an ordinary *sql.DB for sqlc, sqlx, bun and the rest of the
// program, and gormlock and entlock on it keep their one message. What fn
// gets is the same *sql.Tx, with the same isolation rules: READ COMMITTED
// (the default) and READ UNCOMMITTED travel with the lock; REPEATABLE
// READ and SERIALIZABLE keep the two-connection protocol. A lock shape
// ([ormlock.All], [ormlock.Semaphore], [ormlock.Shared]) costs two round
// trips too, and so does a transactional [RunOnce]: its ledger claim
// travels with BEGIN and the lock, its mark done with COMMIT (see
// docs/PROTOCOL.md, database/sql's BEGIN). On another driver (lib/pq,
// go-sql-driver/mysql) the wrapper changes nothing. (*sql.Conn).Raw on
// the pool hands the wrapper's connection; the driver's own is not
// reachable through it.
//
// What happens on each server, on cancellation, at each isolation level
// and deadline, and how to size the pool: docs/PROTOCOL.md.
package sqllock
