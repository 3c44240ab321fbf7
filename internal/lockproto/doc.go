// Package lockproto is ormlock's lock protocol, written once: acquire and
// release per dialect on a pinned *sql.Conn or an open transaction. It is the
// only place where lock SQL text lives; the verb core (internal/verbs),
// the adapters' bindings, the ledger and the flows in this package call
// these functions.
//
// What the protocol does on each server, and its promises on isolation
// levels (BeginLocked's two-connection path above READ COMMITTED on
// PostgreSQL), deadlines (transactions detached from the caller's
// cancellation, every wait still bounded by it), cancellation, nesting and
// pool sizing, is written once in docs/PROTOCOL.md; the comments here name
// the mechanism, not the promise.
//
// # One Transaction, top-down
//
// A warm gormlock.Transaction on PostgreSQL (pgx driver, READ COMMITTED,
// no fencing, no hook, the server check cached) runs the functions of
// these 22 files, in this order, from the call to its COMMIT (measured by
// scripts/files-crossed: the non-test files with a statement whose
// coverage count a second call raises over a first; 20 before the verbs
// and the hook each moved to a file of their own (internal/verbs'
// lockverbs.go, hook.go), to keep every file under 400 lines; 19 before the lock
// mechanism, mechanism.go, was an interface of its own; 17 before pgx's side
// moved out of this package into internal/pgxdriver, which the path now
// crosses with this package's pgdriver.go; 21 before the verb core, at
// a0a7364, and 22 before the one-message path, the lock shapes'
// predicates, the refusal of a cached server and Held's context value
// each moved into a file the path crosses anyway).
// entlock's, sqllock's and pgxlock's Transaction differ only in steps 1
// and 2 (their bindings), and then in how fn gets its transaction (their
// verbs.Driver's Locked and Call, steps 5 and 7).
//
//  1. gormlock/transaction.go: Transaction, which forwards to
//     internal/verbs/lockverbs.go's TransactionOf with gormlock's Driver (fn
//     and the binder); ctxOf (GORM's context).
//  2. verbs.go: Prepare, Open and CheckHandle (the checks, in the
//     precedence that docs/PROTOCOL.md (Error precedence) states), then
//     gormlock/binding.go: binder.Nil, binder.Bind with dialectOf and
//     configFor (the plugin's defaults, internal/config/config.go: New,
//     With, Err), and transaction.go's inTx, primary, primarySQL,
//     prepared.
//  3. verbs.go: Pool.Op; op.go: NewOpHeld, which validates the key and
//     resolves its target (target.go: shapeCombines, newTarget;
//     mechanism.go: mechanismFor, plainItem, pgAdvisory.resolve;
//     internal/keys/keys.go: Of, Name, Validate, ValidateName, IsShape,
//     Postgres; keyhash/keyhash.go: Int64NS); lockproto.go: DialectOf.
//  4. detect.go: EndedLock (deadline.go: ctxErr), CheckServerOn, a
//     map look-up once the pool passed (serverFacts.refuse).
//  5. lockverbs.go: TransactionOf; hook.go: Op.Use, StartHook (event.go:
//     beginUse, which leaves the Op in ctx for ormlock.Held, config.go:
//     WithLock; then nothing more without WithHook), Ending, whose
//     deferred call ends the use (EndHook) on every path out, a panic
//     included; lockverbs.go: inLockTx.
//  6. lockedtx.go: Op.BeginLocked, which asks the target's mechanism
//     (pgAdvisory.beginLocked), SnapshotIsolation; xact.go:
//     pgAdvisory.beginInline, pinXact, beginOneMessage; pgdriver.go: poolNative,
//     pinLock (sqlPin, the pinned connection's kind), oneMessageOn,
//     isPgx, withWire (the registered driver's wire of the connection:
//     internal/pgxdriver/pgxdriver.go, driver.Wire); onemsg.go:
//     pgAdvisory.lockOneMessage, lockSend, lockExchange.send: BEGIN and the lock in
//     one message, on pgx's pgconn (pgxdriver.go: wire.Exec, reply;
//     pgmessage.go: pgBegin, snapshotLevel,
//     pgTryMessage, readLockReply, parseLockRow; on a direct connection the
//     prepared statement, prepared.go: pgConnStateOf, pgAdvisory.lockPrepared);
//     op.go: attempt (deadline.go: budget, stmtCtx, txContext), settle;
//     hook.go: Emit (event.go: hookEvent and newEvent, built for an observer or an
//     ormlock.EventHook only).
//  7. lockverbs.go: inLockTx has the Driver make fn's handle (op.go:
//     TokenContext; transaction.go: driver.Locked, driver.session, the
//     GORM session over the transaction), then lockedtx.go: RunTx runs fn
//     through lockverbs.go's call and transaction.go's driver.Call.
//  8. lockedtx.go: LockedTx.Commit (deadline.go: withinGrace), which
//     commits the OneMessageTx (onemsg.go: Commit, markDone, end) and
//     ends the lock with it (LockedTx.end, op.go: EndXact; hook.go: Emit).
//
// pgxlock's Transaction takes its lock connection from the pgx pool
// itself in step 6 (pgdriver.go: poolNative, pinLock, poolPin over
// Op.LockConns; internal/pgxdriver/pool.go: pool.PinLock, lockConn), with
// no *sql.Conn between pgx and the protocol; Session and Lead do the same.
//
// This package imports no database driver. What is pgx's own (the wire of
// a connection, the pool-native lock connection, the multiplexer probe,
// pgx's errors) is internal/pgxdriver's, behind the interfaces of
// pgdriver.go (PgWire, PgReply, LockConn, LockConnPool, PgDriver); it
// registers itself when linked (internal/verbs links it).
//
// The other protocols of step 6: split.go, PostgreSQL at REPEATABLE READ
// and SERIALIZABLE (the lock in a lock-only transaction, lockonlytx.go,
// then fn's transaction on a second connection); pinned.go,
// MySQL/MariaDB (GET_LOCK on a pinned connection, mysqlnamed.go, then the
// transaction on that same connection: 4 round trips, every lock statement
// text with the name a hex literal, and a set tried once in one statement
// each way, mysqlshape.go); fence.go with WithFencing
// (IssueToken once the lock is held); lost.go tells a lost lock by a
// connection that went away; implicit.go a MySQL/MariaDB transaction that
// fn's DDL committed.
//
// Every wait on that path (a connection, BEGIN, the lock, COMMIT, the
// release) is bounded by the caller's context, by the rules in deadline.go.
// The other verbs: session.go (Session, on a connection of its own, or on
// shared lock connections: sharedlock.go, sharedconn.go), lead.go (Lead,
// Campaign; leadresign.go: a term's poll for a resign), holder.go (who holds a lock), owner.go (WithOwner), nested.go
// (a lock in the caller's own open transaction: gormlock's nested call,
// sqllock's and pgxlock's Lock).
//
// # How to add a lock mechanism
//
// A lock mechanism is the kind of server lock a target is taken with
// (mechanism.go's Mechanism: today pgAdvisory, PostgreSQL's advisory
// locks, and mysqlNamed, MySQL's and MariaDB's named locks). The protocol
// asks the target's mechanism (Target.Mechanism) and compares no dialect
// or target kind; a lock shape (All, Shared, Semaphore) is a target whose
// items every mechanism resolves and takes one by one (shapes.go's
// heldItems), the single key the one-item case with its fast paths. A new
// mechanism (a lease table, say) takes these files:
//
//   - mechanism.go: a type implementing Mechanism: its capabilities
//     (SharedMode, ServerWait, SessionLevel, XactLevel, OneMessage), its
//     items' resolution, canonical order, names and local identity, and
//     mechanismFor's choice of it (the one place that does);
//   - a file of its own, as pinned.go, mysqlnamed.go and mysqlshape.go are
//     the named lock's and xact.go, split.go, lockonlytx.go, onemsg.go and
//     prepared.go the advisory lock's: its Transaction (beginLocked), its
//     Session hold (hold: the check and release the keepalive runs), its
//     session-level try and release of a key and of an item (tryKey,
//     unlockKey, tryItem, unlockItem), its shared lock connection's set-up
//     (openShared) and fencing token (sharedToken);
//   - holder.go: the query that lists a lock's holders;
//   - docs/PROTOCOL.md: what it does on each server, and the statements.
//
// # Leases
//
// The lease (leaseMech, chosen by mechanismFor when the options carry
// WithLease) is such a mechanism: a row of the lease table per key, held by
// no connection. lease.go is the type and the interfaces it answers in
// place of a pinned connection (ownSession: Op.Session hands it the whole
// Session; nestRefuser: CheckNested refuses a nested lease; serverLockFree:
// the server check's fake-lock verdict, a Galera node's, does not concern
// it); leasesql.go and leaseshared.go its SQL per family (leaseSQL: pgLease,
// myLease, picked with PerServer, the DDL in internal/schema); leasehold.go
// one acquisition (its rows, holder id, deadline, loss); leaseverbs.go its
// Session and its Transaction (the LockedTx's txLock: the check before
// COMMIT in fn's transaction); leaserenew.go the batched renewals.
package lockproto
