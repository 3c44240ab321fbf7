// Package lockproto is ormlock's lock protocol, written once: acquire and
// release per dialect on a pinned *sql.Conn or an open transaction. It is the
// only place where lock SQL text lives; the four adapters (gormlock,
// entlock, sqllock, pgxlock), the ledger and the flows in this package call
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
// A gormlock.Transaction call (entlock's and sqllock's reach the same
// BeginLocked; pgxlock's through internal/dbverbs) reads through these
// files in this order:
//
//  1. op.go: NewOp validates the key and settings and resolves the key for
//     the dialect; detect.go: CheckServer refuses, once per pool, a server
//     whose locks exclude nobody (a standby or read-only replica, a Galera
//     node, CockroachDB before 26.3).
//  2. lockedtx.go: Op.BeginLocked checks fencing's set-up (fence.go) and
//     picks one of the three protocols below by dialect and isolation.
//  3. xact.go, PostgreSQL at READ COMMITTED: beginInline pins a connection;
//     with pgx, onemsg.go's lockOneMessage sends BEGIN and the lock as one
//     message (its text and reply parser: pgmessage.go; on a direct
//     connection, the prepared statement: prepared.go) and returns a
//     OneMessageTx (onemsgtx.go); with other drivers, BEGIN, then op.go's
//     acquireXact (the SQL: pgxact.go's PGTryXact and PGWaitXact).
//  4. split.go, PostgreSQL at REPEATABLE READ and SERIALIZABLE: the lock in
//     a lock-only transaction (lockonlytx.go), then fn's transaction on a
//     second connection.
//  5. pinned.go, MySQL/MariaDB: GET_LOCK on a pinned connection (op.go's
//     AcquireNamed; the SQL: mysqlnamed.go), then the transaction on that
//     same connection.
//  6. fence.go: with WithFencing, IssueToken issues the token once the lock
//     is held. The adapter then runs fn in LockedTx.Tx.
//  7. lockedtx.go: LockedTx.Commit (or Rollback) ends the transaction, then
//     the lock (end: a PostgreSQL xact lock ends with its transaction;
//     pinned.go's ReleaseNamed on MySQL/MariaDB; lost.go tells a lost lock
//     by a connection that went away).
//
// Every wait on that path (a connection, BEGIN, the lock, COMMIT, the
// release) is bounded by the caller's context, by the rules in deadline.go.
// The other verbs: session.go (Session, on a connection of its own, or on
// shared lock connections: sharedlock.go, sharedconn.go), lead.go (Lead,
// Campaign), holder.go (who holds a lock), owner.go (WithOwner).
package lockproto
