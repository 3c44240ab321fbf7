package ormlock

import (
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/ormlock/ormlock/keyhash"
)

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
type Key struct {
	kind   keyKind
	name   string
	id     int64
	cl, ob int32
}

type keyKind uint8

const (
	kindNone keyKind = iota
	kindName
	kindID
	kindPair
)

// KeyType is the set of types the verbs accept as a key: a name (string), an
// id (int64 or int) or a [Key].
type KeyType interface {
	string | int64 | int | Key
}

// Name returns the key for a lock name. The name must be non-empty valid
// UTF-8 without NUL bytes, at most [MaxNameLen] bytes; [Key.Validate]
// reports otherwise.
func Name(name string) Key { return Key{kind: kindName, name: name} }

// ID returns the key for a numeric lock id, used as-is as a PostgreSQL bigint
// advisory lock key.
func ID(id int64) Key { return Key{kind: kindID, id: id} }

// Pair returns the key for PostgreSQL's two-int form,
// pg_advisory_xact_lock(classID, objID).
func Pair(classID, objID int32) Key { return Key{kind: kindPair, cl: classID, ob: objID} }

// KeyOf converts any [KeyType] to a Key.
func KeyOf[K KeyType](k K) Key {
	switch v := any(k).(type) {
	case string:
		return Name(v)
	case int64:
		return ID(v)
	case int:
		return ID(int64(v))
	case Key:
		return v
	}
	return Key{}
}

// IsName reports whether k is a name key; Name returns it.
func (k Key) IsName() bool { return k.kind == kindName }

// IsPair reports whether k is a (classid, objid) pair.
func (k Key) IsPair() bool { return k.kind == kindPair }

// NameValue returns the name of a name key, or "".
func (k Key) NameValue() string { return k.name }

// Validate returns an error wrapping [ErrInvalidKey] when k cannot name a lock.
func (k Key) Validate() error {
	switch k.kind {
	case kindNone:
		return fmt.Errorf("%w: zero Key (use ormlock.Name, ormlock.ID or ormlock.Pair)", ErrInvalidKey)
	case kindName:
		return ValidateName("key", k.name)
	}
	return nil
}

// Length limits of names and namespaces, in bytes of UTF-8.
const (
	// MaxNameLen is the longest lock name a [Name] key accepts: 1 KiB,
	// room for every name ormlock derives itself ([RunKey] of the longest
	// job name is 808 bytes). A name, which errors and observer events
	// carry, stays bounded; a longer one is [ErrInvalidKey].
	MaxNameLen = 1024
	// MaxNamespaceLen is the longest namespace [WithNamespace] accepts:
	// it must fit the RunOnce ledger's namespace column.
	MaxNamespaceLen = 128
)

// ValidateName checks a lock name or namespace (what names the value in the
// error): names must be non-empty (namespaces may be empty), at most
// [MaxNameLen] bytes ([MaxNamespaceLen] for a namespace), valid UTF-8 and
// free of NUL bytes, so that every dialect and the psql expression in the
// keyhash docs agree on the key. The length is checked first, so that the
// error never echoes more than the limit.
func ValidateName(what, s string) error {
	if s == "" && what == "key" {
		return fmt.Errorf("%w: empty lock name", ErrInvalidKey)
	}
	limit := MaxNameLen
	if what == "namespace" {
		limit = MaxNamespaceLen
	}
	if len(s) > limit {
		return fmt.Errorf("%w: %s is %d bytes long, at most %d are accepted (it begins %q)", ErrInvalidKey, what, len(s), limit, prefix(s, 32))
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s %q is not valid UTF-8", ErrInvalidKey, what, s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return fmt.Errorf("%w: %s %q contains a NUL byte", ErrInvalidKey, what, s)
		}
	}
	return nil
}

// prefix returns at most n bytes of the start of s, cut at a character
// boundary when s is valid UTF-8.
func prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// String returns a readable form: the name, "id:N" or "pair:C,O".
func (k Key) String() string {
	switch k.kind {
	case kindName:
		return k.name
	case kindID:
		return "id:" + strconv.FormatInt(k.id, 10)
	case kindPair:
		return "pair:" + strconv.FormatInt(int64(k.cl), 10) + "," + strconv.FormatInt(int64(k.ob), 10)
	}
	return "<invalid key>"
}

// PostgresKey is a key resolved for PostgreSQL: either a bigint (IsPair false)
// or a (classid, objid) pair.
type PostgresKey struct {
	IsPair  bool
	Int64   int64
	ClassID int32
	ObjID   int32
}

// Postgres resolves k in namespace ns to the PostgreSQL advisory lock key.
func (k Key) Postgres(ns string) PostgresKey {
	switch k.kind {
	case kindName:
		return PostgresKey{Int64: keyhash.Int64NS(ns, k.name)}
	case kindID:
		return PostgresKey{Int64: k.id}
	case kindPair:
		return PostgresKey{IsPair: true, ClassID: k.cl, ObjID: k.ob}
	}
	return PostgresKey{}
}

// MySQL resolves k in namespace ns to the MySQL/MariaDB GET_LOCK name (at
// most 64 bytes).
func (k Key) MySQL(ns string) string {
	switch k.kind {
	case kindName:
		return keyhash.MySQLName(ns, k.name)
	case kindID:
		return keyhash.MySQLName(ns, strconv.FormatInt(k.id, 10))
	case kindPair:
		return keyhash.MySQLName(ns, strconv.FormatInt(int64(k.cl), 10)+":"+strconv.FormatInt(int64(k.ob), 10))
	}
	return ""
}
