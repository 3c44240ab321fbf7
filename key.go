package ormlock

import "github.com/ormlock/ormlock/internal/keys"

// Key names a lock. Most code names locks with a string; numeric keys exist so
// that code which already calls pg_advisory_xact_lock(12345) or
// pg_advisory_xact_lock(1, 2) keeps excluding ormlock during a migration.
//
// The verbs accept a Key or, through [KeyType], a plain string (a name) or an
// int64/int (an ID), so gormlock.Transaction(db, "daily-settlement", fn) works
// as written.
//
// How a key maps to the server (keyhash spec v1):
//
//   - Name on PostgreSQL: the bigint keyhash.Int64NS(namespace, name).
//   - Name on MySQL/MariaDB: keyhash.MySQLName(namespace, name).
//   - ID on PostgreSQL: the bigint itself; the namespace is ignored, so the
//     key equals what existing code passes to pg_advisory_xact_lock(bigint).
//   - ID on MySQL/MariaDB: the decimal text of the id, prefixed "ns:" when a
//     namespace is set.
//   - Pair on PostgreSQL: the (int, int) form; the namespace is ignored.
//     PostgreSQL keeps bigint keys and (int, int) keys in separate lock spaces
//     (pg_locks.objsubid 1 and 2): a Pair never excludes a Name or an ID.
//   - Pair on MySQL/MariaDB: "classid:objid" (with the "ns:" prefix when set).
//
// On MySQL/MariaDB all three kinds share one space of lock names, and these
// map to the same GET_LOCK name, so they exclude each other there while
// PostgreSQL keeps them apart:
//
//   - ID(n) and Name of n's decimal text: ID(42) and Name("42");
//   - Pair(c, o) and Name("c:o"): Pair(1, 2) and Name("1:2");
//   - a name in a namespace and the name "ns:name" without one: name "y" in
//     namespace "x" and Name("x:y") without a namespace (likewise an ID or
//     Pair in a namespace and the matching plain name);
//   - two names longer than 64 bytes once prefixed, only if SHA-256 collides
//     in its first 128 bits.
//
// This is kept, not re-encoded, on purpose: a plain name without a namespace
// is the very string hand-written code passes to GET_LOCK
// ('daily-settlement' keeps excluding Name("daily-settlement")), and so
// "ns:name" and the decimal forms are producible by a plain name whatever
// encoding the others used. Changing the encoding of IDs, pairs or namespaced
// names would instead let replicas running the previous version and this one
// hold "the same" lock at once during a rolling deploy. A collision only makes
// two locks exclude each other (a call gets [ErrNotAcquired] or waits); it
// never lets two holders in. To avoid it, use one key kind per application
// and, when some code sets a namespace, give every application on the server
// one (namespaces cannot contain ':'). Namespaces are not a security
// boundary: see [WithNamespace].
//
// MariaDB's manual says GET_LOCK names are compared without regard to case,
// but MariaDB 10.11 keeps "Settle" and "settle" apart (measured), as
// PostgreSQL keys do; other MySQL versions may fold case. Folding can only
// make two names exclude each other, never let one name be held twice; name
// locks in one case to behave alike everywhere.
type Key = keys.Key

// KeyType is the set of types the verbs accept as a key: a name (string), an
// id (int64 or int) or a [Key].
type KeyType = keys.Type

// Name returns the key for a lock name. The name must be non-empty valid
// UTF-8 without NUL bytes, at most [MaxNameLen] bytes; the verbs return
// [ErrInvalidKey] otherwise.
func Name(name string) Key { return keys.Name(name) }

// ID returns the key for a numeric lock id, used as-is as a PostgreSQL bigint
// advisory lock key.
func ID(id int64) Key { return keys.ID(id) }

// Pair returns the key for PostgreSQL's two-int form,
// pg_advisory_xact_lock(classID, objID).
func Pair(classID, objID int32) Key { return keys.Pair(classID, objID) }

// Length limits of names and namespaces, in bytes of UTF-8.
const (
	// MaxNameLen is the longest lock name a [Name] key accepts: 1 KiB,
	// room for every name ormlock derives itself (a RunOnce lock name for
	// the longest job name is 808 bytes). A name, which errors and observer
	// events carry, stays bounded; a longer one is [ErrInvalidKey].
	MaxNameLen = 1024
	// MaxNamespaceLen is the longest namespace [WithNamespace] accepts:
	// it must fit the RunOnce ledger's namespace column.
	MaxNamespaceLen = 128
)
