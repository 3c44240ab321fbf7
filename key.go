package ormlock

import (
	"time"

	"github.com/ormlock/ormlock/internal/keys"
)

// Key names a lock. Most code names locks with a string; numeric keys exist so
// that code which already calls pg_advisory_xact_lock(12345) or
// pg_advisory_xact_lock(1, 2) keeps excluding ormlock during a migration.
//
// The verbs accept a Key or, through [KeyType], a plain string (a name) or an
// int64/int (an ID), so gormlock.Transaction(db, "daily-settlement", fn) works
// as written.
//
// On PostgreSQL a Name is the bigint keyhash.Int64NS(namespace, name), an ID
// the bigint itself and a Pair the (int, int) form, both ignoring the
// namespace; a Pair never excludes a Name or an ID there. On MySQL/MariaDB
// every kind is a GET_LOCK name (keyhash.MySQLName) in one shared space, so
// ID(42) and Name("42") exclude each other there: kept on purpose, since a
// collision never lets two holders in. Use one key kind per application.
// Namespaces are not a security boundary (see [WithNamespace]). See
// docs/PROTOCOL.md (Keys on each server; Which keys meet on MySQL/MariaDB,
// and why they stay so).
//
// It is defined once, in internal/keys, and named here. Its methods:
//
//	// Validate returns an error wrapping ErrInvalidKey when k cannot name a
//	// lock: the zero Key, or a name that is empty, longer than 1,024 bytes,
//	// not valid UTF-8 or holding a NUL byte. The verbs check it themselves;
//	// it is exported so that a program can reject a configured name at
//	// start-up, as the scheduler module does.
//	func (k Key) Validate() error
//
//	// String returns a readable form of k: the name, "id:N" or "pair:C,O";
//	// for a lock shape "all(K1,K2,...)", "shared(K)" or "semaphore(K,N)",
//	// at most about 256 bytes (a long set ends in "…+N more").
//	func (k Key) String() string
type Key = keys.Key

// KeyType is the set of types the verbs accept as a key: a name (string), an
// id (int64 or int) or a [Key].
type KeyType interface {
	string | int64 | int | Key
}

// Name returns the key for a lock name. The name must be non-empty valid
// UTF-8 without NUL bytes, at most 1,024 bytes (room for every name ormlock
// derives itself: a RunOnce lock name for the longest job name is 808
// bytes); the verbs return [ErrInvalidKey] otherwise.
func Name(name string) Key { return keys.Name(name) }

// ID returns the key for a numeric lock id, used as-is as a PostgreSQL bigint
// advisory lock key.
func ID(id int64) Key { return keys.ID(id) }

// Pair returns the key for PostgreSQL's two-int form,
// pg_advisory_xact_lock(classID, objID).
func Pair(classID, objID int32) Key { return keys.Pair(classID, objID) }

// All returns the key of every key in ks at once, all or none: a lock
// shape, accepted as the key of Transaction and Session by every adapter
// and by the command (ormlock run KEY... -- COMMAND). Every key is held
// while fn runs; when any is refused none is left held. The keys are taken
// one lock call each, in one canonical order over the resolved server keys
// (after the namespace: PostgreSQL's bigint or pair keys, MySQL/MariaDB's
// lock names compared as the server compares them, case-insensitively), so
// two callers with overlapping sets in any order never deadlock. A wait
// ([WithWait]) spends one budget across the keys.
//
// One key kind per call: mix kinds through Name, ID and Pair
// (All(ormlock.Name("a"), ormlock.ID(42))). An element may be Shared (on
// PostgreSQL); a set inside the set is flattened; a Semaphore cannot be an
// element. An empty set, more than 64 keys, or two keys that resolve to
// one server lock (on MySQL/MariaDB ID(42) and Name("42") are one lock)
// make the verbs return [ErrInvalidKey] before anything is taken. Which
// verbs and options take a shape: docs/PROTOCOL.md (Lock shapes).
func All[K KeyType](ks ...K) Key {
	out := make([]keys.Key, len(ks))
	for i, k := range ks {
		out[i] = keys.Of[Key](k)
	}
	return keys.All(out...)
}

// Shared returns key taken in share mode: any number of Shared holders at
// once, and no exclusive holder of key meanwhile (PostgreSQL's
// pg_advisory_xact_lock_shared and pg_try_advisory_lock_shared; raw SQL of
// either mode meets it). Shared of a set is every key of it shared.
// MySQL/MariaDB have no shared named lock: every verb returns
// [ErrUnsupportedDialect] there before anything is taken.
func Shared[K KeyType](key K) Key { return keys.Shared(keys.Of[Key](key)) }

// Semaphore returns the key of at most n holders of key at once, on every
// server: n slot locks, slot i (1 to n) the name
// "ormlock.semaphore:" + key's text + "#" + i (keyhash spec v1, as any name
// in the namespace), and a holder takes any one free slot, trying them
// from a random one so contention spreads. Slots do not depend on n:
// callers that disagree on n share their first slots, and at most max(n)
// hold at once. Semaphore(k, n) and a plain k are different locks and do
// not exclude each other. A wait ([WithWait]) tries every slot again
// with a backoff (from 10 ms, doubling, at most 500 ms) until the wait's
// budget ends. n must be 1 to 128 ([ErrInvalidKey]); key must be one plain
// key.
func Semaphore[K KeyType](key K, n int) Key { return keys.Semaphore(keys.Of[Key](key), n) }

// Rate returns the key of at most n acquisitions of key per interval per:
// a rate limit that commits or rolls back with the transaction, accepted
// as the key of Transaction by every adapter (gormlock, entlock, sqllock,
// pgxlock; gormlock's inside db.Transaction too, where the token is the
// caller's transaction's) and refused by every other verb with
// [ErrInvalidArgument].
//
// The key keeps n token rows in the rate table ([WithRateTable], created
// by Migrate). A Transaction takes one free token inside fn's own
// transaction (SELECT … FOR UPDATE SKIP LOCKED, then marks it used until
// now + per by the database server's clock): the use is committed with
// fn's work, and a transaction that rolls back (fn's error, a panic, a
// failed COMMIT) gives its token back. Holders of one key never wait for
// one another: each locks its own token row, and a taken row is skipped.
//
// The promise, by the server's clock: in any interval of length per, the
// tokens taken by committed transactions plus those held by transactions
// still open never exceed n (a sliding window: each token is used at most
// once per per, so there is no burst of 2n across a window's edge). A
// transaction counts at the moment it took its token, not when it
// commits: Rate bounds how many start per interval, not how many run at
// once (that is [Semaphore]).
//
// When no token is free, fn is not called and the error wraps
// [ErrNotAcquired], saying when the next token is due as far as the
// server can tell (an open holder's rollback may free one sooner).
// [WithWait] waits for it within its budget, sleeping until that time or,
// while a token is held by an open transaction, with a backoff (from
// 10 ms, doubling, at most 500 ms).
//
// n must be 1 to 10,000 and per 1 s to 168 h (7 days), else
// [ErrInvalidKey]; key must be one plain key (a Rate of All, Shared or
// Semaphore, or a Rate inside them, is ErrInvalidKey). Callers that
// disagree on n or per for one key share its tokens: a caller uses the
// tokens 1 to its own n, each marked used for its own per, so together
// they admit at most max(n) per interval of min(per). MySQL needs 8.0 and
// MariaDB 10.6 (SKIP LOCKED), and a Galera cluster is refused; see
// docs/PROTOCOL.md (Rate limits) for the SQL, the round trips and how the
// rows are pruned.
func Rate[K KeyType](key K, n int, per time.Duration) Key {
	return keys.Rate(keys.Of[Key](key), n, per)
}
