// Package keys is the representation of ormlock's lock keys and their
// resolution per dialect (keyhash spec v1): the plumbing behind
// ormlock.Name, ormlock.ID and ormlock.Pair that the adapters, the lock
// protocol, the ledger and the command share. ormlock.Key is an alias of
// [Key], so every exported method of Key is one of ormlock.Key (Validate
// and String, no other: the rest are functions); the key derivation is
// documented on ormlock.Key and in docs/PROTOCOL.md.
package keys

import (
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/keyhash"
)

// Key names a lock: ormlock.Key, an alias of this type, documents it.
type Key struct {
	kind   keyKind
	name   string // kindName: the name; kindAll: the elements (shapes.go); kindBad: why
	id     int64
	cl, ob int32
	shared bool          // Shared: the lock is taken in share mode (PostgreSQL)
	n      int32         // Semaphore: at most n holders (0: not a semaphore)
	rate   int32         // Rate: at most rate tokens per per (0: not a rate, rate.go)
	per    time.Duration // Rate: the limit's interval
}

type keyKind uint8

const (
	kindNone keyKind = iota
	kindName
	kindID
	kindPair
	kindAll // several keys, all or none (shapes.go)
	kindBad // a shape built from keys it does not combine with; name says why
)

// Name returns the key for a lock name (ormlock.Name).
func Name(name string) Key { return Key{kind: kindName, name: name} }

// ID returns the key for a numeric lock id (ormlock.ID).
func ID(id int64) Key { return Key{kind: kindID, id: id} }

// Pair returns the key for PostgreSQL's two-int form (ormlock.Pair).
func Pair(classID, objID int32) Key { return Key{kind: kindPair, cl: classID, ob: objID} }

// IsName reports whether k is a name key; Name returns it.
func IsName(k Key) bool { return k.kind == kindName }

// IsPair reports whether k is a (classid, objid) pair.
func IsPair(k Key) bool { return k.kind == kindPair }

// IsSet reports whether k is a set (ormlock.All).
func IsSet(k Key) bool { return k.kind == kindAll }

// IsShared reports whether k is one key taken in share mode.
func IsShared(k Key) bool { return k.shared && k.kind != kindAll }

// IsShape reports whether k is anything but one exclusive key.
func IsShape(k Key) bool { return k.kind == kindAll || k.shared || k.n != 0 }

// Count is n of a semaphore, 0 for any other key.
func Count(k Key) int { return int(k.n) }

// NameValue returns the name of a name key, or "".
func NameValue(k Key) string { return k.name }

// Validate returns an error wrapping errs.ErrInvalidKey when k cannot name
// a lock (a name longer than [MaxNameLen] bytes among the reasons);
// ormlock.Key documents it.
func (k Key) Validate() error {
	switch k.kind {
	case kindNone:
		return fmt.Errorf("%w: zero Key (use ormlock.Name, ormlock.ID or ormlock.Pair)", errs.ErrInvalidKey)
	case kindName:
		if err := ValidateName("key", k.name); err != nil {
			return err
		}
	case kindAll:
		return k.validateSet()
	case kindBad:
		return fmt.Errorf("%w: %s", errs.ErrInvalidKey, k.name)
	}
	if k.rate != 0 {
		return k.validateRate()
	}
	if k.n != 0 {
		return k.validateSemaphore()
	}
	return nil
}

// Length limits of names and namespaces, in bytes of UTF-8: limits, not
// settings, so the root package states them in the docs of ormlock.Name and
// ormlock.WithNamespace (TestLimitsDocumented keeps them in step).
const (
	// MaxNameLen is the longest lock name: 1 KiB, room for every name
	// ormlock derives itself (a RunOnce lock name for the longest job name
	// is 808 bytes). A name, which errors and observer events carry, stays
	// bounded.
	MaxNameLen = 1024
	// MaxNamespaceLen is the longest namespace: it must fit the RunOnce
	// ledger's namespace column.
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
		return fmt.Errorf("%w: empty lock name", errs.ErrInvalidKey)
	}
	limit := MaxNameLen
	if what == "namespace" {
		limit = MaxNamespaceLen
	}
	if len(s) > limit {
		return fmt.Errorf("%w: %s is %d bytes long, at most %d are accepted (it begins %q)", errs.ErrInvalidKey, what, len(s), limit, prefix(s, 32))
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s %q is not valid UTF-8", errs.ErrInvalidKey, what, s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return fmt.Errorf("%w: %s %q contains a NUL byte", errs.ErrInvalidKey, what, s)
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

// String returns a readable form: the name, "id:N" or "pair:C,O"; for a
// shape "shared(K)", "semaphore(K,N)" or "all(K1,K2,...)", bounded
// (shapes.go).
func (k Key) String() string {
	if k.rate != 0 {
		return k.rateString()
	}
	if k.kind == kindAll || k.shared || k.n != 0 || k.kind == kindBad {
		return k.shapeString()
	}
	return k.base()
}

// base is String of a one-key key, without its shape.
func (k Key) base() string {
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
func Postgres(k Key, ns string) PostgresKey {
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
func MySQL(k Key, ns string) string {
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

// RunKeyPrefix starts the name of every RunOnce lock; see [RunKey].
const RunKeyPrefix = "ormlock.runonce:"

// RunKey returns the lock key RunOnce takes for (job, slot): the name
//
//	"ormlock.runonce:" + job + "@" + slot in UTC as 2006-01-02T15:04:05.000000Z
//
// for example "ormlock.runonce:daily-settlement@2025-03-30T22:00:00.000000Z".
// The namespace (ormlock.WithNamespace) applies to it as to any name. The slot is
// truncated to whole microseconds, the precision of the ledger's timestamp
// columns. This derivation is part of the compatibility promise of keyhash
// spec v1: replicas running different versions must lock the same key.
func RunKey(job string, slot time.Time) Key {
	return Name(RunKeyPrefix + job + "@" + NormalizeSlot(slot).Format(runKeyTime))
}

const runKeyTime = "2006-01-02T15:04:05.000000Z"

// NormalizeSlot returns slot as RunOnce stores it: in UTC, truncated to
// whole microseconds, without a monotonic clock reading.
func NormalizeSlot(slot time.Time) time.Time {
	return slot.UTC().Truncate(time.Microsecond)
}

// keyStruct is the struct a [Key] is made of.
type keyStruct = struct {
	kind   keyKind
	name   string
	id     int64
	cl, ob int32
	shared bool
	n      int32
	rate   int32
	per    time.Duration
}

// Root is the constraint of [Of]'s first type argument, ormlock.Key:
// [Key] itself since ormlock.Key is an alias of it (any type defined over
// Key's struct converts as well).
type Root interface{ ~keyStruct }

// Type holds every type the verbs accept as a key (ormlock.KeyType: a
// name, an id, an ormlock.Key).
type Type interface {
	string | int64 | int | ~keyStruct
}

// Of converts a key of any accepted type to a [Key]: a string is a Name,
// an int64 or int an ID, and an R (ormlock.Key) the key it is.
func Of[R Root, K Type](k K) Key {
	switch v := any(k).(type) {
	case string:
		return Name(v)
	case int64:
		return ID(v)
	case int:
		return ID(int64(v))
	case R:
		return Key(v)
	case Key:
		return v
	}
	return Key{}
}
