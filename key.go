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
// On PostgreSQL a Name is the bigint keyhash.Int64NS(namespace, name), an ID
// the bigint itself and a Pair the (int, int) form, both ignoring the
// namespace; a Pair never excludes a Name or an ID there. On MySQL/MariaDB
// every kind is a GET_LOCK name (keyhash.MySQLName) in one shared space, so
// ID(42) and Name("42") exclude each other there: kept on purpose, since a
// collision never lets two holders in. Use one key kind per application.
// Namespaces are not a security boundary (see [WithNamespace]). See
// docs/PROTOCOL.md (Keys on each server; Which keys meet on MySQL/MariaDB,
// and why they stay so).
type Key keys.Key

// KeyType is the set of types the verbs accept as a key: a name (string), an
// id (int64 or int) or a [Key].
type KeyType interface {
	string | int64 | int | Key
}

// Name returns the key for a lock name. The name must be non-empty valid
// UTF-8 without NUL bytes, at most 1,024 bytes (room for every name ormlock
// derives itself: a RunOnce lock name for the longest job name is 808
// bytes); the verbs return [ErrInvalidKey] otherwise.
func Name(name string) Key { return Key(keys.Name(name)) }

// ID returns the key for a numeric lock id, used as-is as a PostgreSQL bigint
// advisory lock key.
func ID(id int64) Key { return Key(keys.ID(id)) }

// Pair returns the key for PostgreSQL's two-int form,
// pg_advisory_xact_lock(classID, objID).
func Pair(classID, objID int32) Key { return Key(keys.Pair(classID, objID)) }

// Validate returns an error wrapping [ErrInvalidKey] when k cannot name a
// lock: the zero Key, or a name that is empty, longer than 1,024 bytes, not
// valid UTF-8 or holding a NUL byte. The verbs check it themselves; it is
// exported so that a program can reject a configured name at start-up, as
// the scheduler module does.
func (k Key) Validate() error { return keys.Key(k).Validate() }

// String returns a readable form of k: the name, "id:N" or "pair:C,O".
func (k Key) String() string { return keys.Key(k).String() }
