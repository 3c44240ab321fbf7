// Package pgxlock takes ormlock's distributed locks (PostgreSQL advisory
// locks) on pgx's own pool, *pgxpool.Pool, for programs on pgx or sqlc with
// pgx: the same locks, keys, ledger and fencing tokens as gormlock, entlock
// and sqllock, so a key excludes across all of them.
//
//	err := pgxlock.Transaction(ctx, pool, "daily-settlement", func(ctx context.Context, tx pgx.Tx) error {
//		_, err := tx.Exec(ctx, "INSERT INTO settlements (day) VALUES ($1)", day)
//		return err // or, with sqlc: queries.WithTx(tx).CreateSettlement(ctx, day)
//	})
//	switch {
//	case errors.Is(err, ormlock.ErrNotAcquired):
//		// another replica holds the lock: nothing to do
//	case err != nil:
//		return err
//	}
//
// The verbs are sqllock's, with fn given a pgx.Tx: [Transaction],
// [Session], [Lead] (one leader per key among the replicas that call it),
// [RunOnce] (with [Migrate], [Runs], [Prune], [RunScheduled]),
// [Holder], and [Lock] in a transaction you began (see below). Options go with each call. fn's ctx carries the fencing
// token ([ormlock.FencingToken], with [ormlock.WithFencing]), which
// [CheckFenced] checks on pgx's CommandTag; a Session's, a Lead's and a
// claimed RunOnce's ctx ends with cause [ormlock.ErrLockLost] when the lock
// is lost. PostgreSQL only (and CockroachDB from v26.3, see
// docs/COMPATIBILITY.md).
//
// # One message
//
// BEGIN and the lock travel as one simple-protocol message, so a locked
// Transaction makes the round trips of a plain pool.Begin / Commit: two, a
// loser two (BEGIN with the lock, ROLLBACK), with [ormlock.WithWait] too
// (docs/PROTOCOL.md, Round trips). On a connection that reaches its backend
// directly the try-once lock is a statement prepared once per connection;
// behind a pooler it is sent as text.
//
// # The transaction fn gets
//
// tx runs on the pool connection that holds the lock: Exec, Query,
// QueryRow, SendBatch, CopyFrom and Prepare are that connection's, and
// tx.Begin opens a savepoint, as pgx's own transactions do. fn may end the
// transaction itself with tx.Commit or tx.Rollback (then the lock is
// released at once); otherwise it commits when fn returns nil and rolls
// back when fn fails or panics. tx.LargeObjects costs one round trip on its
// first call (pgx builds the large-object API only on a transaction of its
// own: a savepoint). The transaction options are database/sql's
// ([ormlock.WithTxOptions]): at REPEATABLE READ and SERIALIZABLE the lock is
// held on a second connection of the pool (docs/PROTOCOL.md, Isolation
// levels), so such a pool needs two connections.
//
// # A lock in your transaction
//
// [Lock] takes the lock in a pgx.Tx you began and end yourself:
// pgx.BeginFunc, pool.Begin, the transaction sqlc's WithTx runs on. It is
// the transaction-level lock, held until tx commits or rolls back:
//
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		if err := pgxlock.Lock(ctx, tx, "settle-"+day); err != nil {
//			return err // ormlock.ErrNotAcquired: another replica settles it
//		}
//		return queries.WithTx(tx).CreateSettlement(ctx, day) // sqlc
//	})
//
// The rules are sqllock.Lock's: a savepoint, released once the lock is
// held and rolled back to on [ormlock.ErrNotAcquired] (held, or a wait
// that ran out) or any other failure but that of the connection, so tx
// goes on as it was; a context cancelled during a lock statement is asked
// of the server (a cancel request), which leaves the connection and tx
// usable. READ COMMITTED only ([ormlock.ErrInvalidArgument] above it);
// [ormlock.WithFencing], [ormlock.WithTxOptions], [ormlock.WithClaim] and
// [ormlock.WithCatchUp] refused with ErrInvalidArgument; events attempt,
// then acquired or not_acquired (Verb "Lock"), with no released event (the
// COMMIT is yours). Four round trips: a statement that checks the server
// and reads tx's isolation, SAVEPOINT, the lock, RELEASE SAVEPOINT (a set
// or a semaphore: a lock statement per key it tries; a wait: one more per
// key). Lock's statements run on tx, so they follow its connection's
// default_query_exec_mode (below).
//
// # Behind PgBouncer
//
// In transaction mode, the lock needs nothing of the pooler: its message is
// one simple-protocol query. The protocol's other statements (the server
// check, the ledger, fencing) and fn's follow the pool's
// default_query_exec_mode: with PgBouncer 1.18 to 1.20 (or without
// max_prepared_statements) use simple_protocol or exec (tested);
// describe_exec (an unnamed statement described in one sync and run in the
// next, which outside a transaction may meet another server connection),
// cache_describe and cache_statement (pgx's default: named statements on a
// server connection the next transaction may not get) need PgBouncer 1.21
// or later with max_prepared_statements set.
//
// # How it reaches the protocol
//
// The protocol is written once (internal/lockproto). Transaction's,
// Session's and Lead's lock connection, wherever the lock travels in one
// message with BEGIN (one key, exclusive or Shared; not
// WithSharedLockConns), is acquired from the pool itself and driven by
// pgx, with no database/sql layer: fn's pgx.Tx runs on it, and it goes back
// to the pool when the lock ends (a connection the server does not report
// idle outside any transaction is destroyed instead). Everything else (the
// server check, the fencing counter, the ledger of RunOnce, Holder, the
// split protocol at REPEATABLE READ and SERIALIZABLE, lock sets and
// semaphores) runs on a *sql.DB over the pool made by pgx's own
// database/sql driver (stdlib.OpenDBFromPool) for the length of the call,
// opened only if the call needs it, whose connections are the pool's too;
// shared lock connections live under one such *sql.DB per pool, open
// while Sessions or Leads use them. Lock's statements run on the caller's
// pgx.Tx itself, through a database/sql view of it for the call, which
// begins and closes nothing. So a program on pgxlock links database/sql
// and pgx's stdlib, and no other driver. Between calls pgxlock keeps no
// goroutine or connection of its own: only, per pool, a stand-in *sql.DB
// (never opened) under which what the server check learned is cached for
// the pool's life, dropped when the pool is garbage collected.
package pgxlock
