package keys

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/keyhash"
)

// Lock shapes (ormlock.All, ormlock.Shared, ormlock.Semaphore): a Key that
// is more than one exclusive key, kept comparable. A set is stored as the
// canonical encoding of its elements in Key.name (kindAll), in the order
// given (the lock protocol orders them by their resolved server keys); a
// shared key is a one-key key with shared set; a semaphore is a one-key key
// with n > 0. A combination the shapes refuse (a semaphore inside a set or
// a shared key, a shape inside a semaphore) is a kindBad key whose
// Validate says why, so the constructors need not return an error.

// Caps on the shapes, documented on ormlock.All and ormlock.Semaphore.
const (
	// MaxSetKeys is the most keys ormlock.All takes: each is a lock held
	// until the transaction or Session ends, in the server's lock table
	// (PostgreSQL's is shared by the whole server, max_locks_per_transaction
	// × max_connections slots, and ends in "53200 out of shared memory"
	// for every session once full).
	MaxSetKeys = 64
	// MaxSemaphore is the largest n of ormlock.Semaphore: a try costs up to
	// n statements (one per slot) when every slot is taken.
	MaxSemaphore = 128
	// maxShapeString bounds Key.String of a shape, which errors and
	// observer events carry.
	maxShapeString = 256
)

// All returns the key of every key in ks, taken all or none (ormlock.All).
// A set inside the set is flattened.
func All(ks ...Key) Key {
	var b []byte
	for _, k := range ks {
		switch {
		case k.kind == kindBad:
			return k
		case k.n != 0:
			return bad("a Semaphore cannot be an element of All")
		case k.rate != 0:
			return bad("a Rate cannot be an element of All")
		case k.kind == kindAll:
			b = append(b, k.name...)
		default:
			b = appendElem(b, k)
		}
	}
	if len(b) == 0 {
		return Key{kind: kindAll, name: ""}
	}
	return Key{kind: kindAll, name: string(b)}
}

// Shared returns k taken in share mode (ormlock.Shared); every key of a set.
func Shared(k Key) Key {
	switch {
	case k.kind == kindBad:
		return k
	case k.n != 0:
		return bad("a Semaphore cannot be Shared")
	case k.rate != 0:
		return bad("a Rate cannot be Shared")
	case k.kind == kindAll:
		es := Elements(k)
		for i := range es {
			es[i].shared = true
		}
		return All(es...)
	}
	k.shared = true
	return k
}

// Semaphore returns the key of at most n holders of k at once
// (ormlock.Semaphore).
func Semaphore(k Key, n int) Key {
	switch {
	case k.kind == kindBad:
		return k
	case k.kind == kindAll || k.shared || k.n != 0 || k.rate != 0:
		return bad("Semaphore takes one plain key, not " + k.String())
	case n < 1:
		return bad("Semaphore of " + k.base() + ": n is " + strconv.Itoa(n) + ", at least 1 is needed")
	case n > MaxSemaphore:
		return bad("Semaphore of " + k.base() + ": n is " + strconv.Itoa(n) + ", at most " + strconv.Itoa(MaxSemaphore) + " are accepted")
	}
	k.n = int32(n)
	return k
}

func bad(why string) Key { return Key{kind: kindBad, name: why} }

// Plain is k without its share mode or count: the one key it is made of
// (the zero Key for a set).
func Plain(k Key) Key {
	if k.kind == kindAll {
		return Key{}
	}
	k.shared, k.n, k.rate, k.per = false, 0, 0, 0
	return k
}

// SlotKey returns the lock key of slot i (1 to n) of a semaphore over k,
// the name
//
//	"ormlock.semaphore:" + text + "#" + i
//
// where text is k's name, or its id in decimal, or "classid:objid" for a
// pair (as the MySQL name of an ID or Pair key is built), so a slot does
// not depend on n: callers that disagree on n share their first slots.
// The namespace applies to it as to any name. This derivation is an
// addition to keyhash spec v1.
func SlotKey(k Key, i int) Key {
	return Name(keyhash.SemaphoreSlot(slotText(k), i))
}

func slotText(k Key) string {
	switch k.kind {
	case kindName:
		return k.name
	case kindID:
		return strconv.FormatInt(k.id, 10)
	case kindPair:
		return strconv.FormatInt(int64(k.cl), 10) + ":" + strconv.FormatInt(int64(k.ob), 10)
	}
	return ""
}

// Elements returns the keys of a set in the order given, each with its
// share mode; nil for any other key. A function, not a method: a method of
// Key would be one of ormlock.Key, an alias of it.
func Elements(k Key) []Key {
	if k.kind != kindAll {
		return nil
	}
	var out []Key
	b := []byte(k.name)
	for len(b) > 0 {
		var e Key
		e, b = readElem(b)
		out = append(out, e)
	}
	return out
}

// The encoding of a set's element: its kind, its share mode, then its
// value: a name as a uvarint length and its bytes, an id as 8 bytes, a pair
// as 4 + 4 bytes, big-endian.
func appendElem(b []byte, k Key) []byte {
	b = append(b, byte(k.kind))
	if k.shared {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	switch k.kind {
	case kindName:
		b = binary.AppendUvarint(b, uint64(len(k.name)))
		b = append(b, k.name...)
	case kindID:
		b = binary.BigEndian.AppendUint64(b, uint64(k.id))
	case kindPair:
		b = binary.BigEndian.AppendUint32(b, uint32(k.cl))
		b = binary.BigEndian.AppendUint32(b, uint32(k.ob))
	}
	return b
}

func readElem(b []byte) (Key, []byte) {
	e := Key{kind: keyKind(b[0]), shared: b[1] == 1}
	b = b[2:]
	switch e.kind {
	case kindName:
		n, w := binary.Uvarint(b)
		e.name, b = string(b[w:w+int(n)]), b[w+int(n):]
	case kindID:
		e.id, b = int64(binary.BigEndian.Uint64(b)), b[8:]
	case kindPair:
		e.cl, e.ob, b = int32(binary.BigEndian.Uint32(b)), int32(binary.BigEndian.Uint32(b[4:])), b[8:]
	}
	return e, b
}

// validateSet checks a set's size and each element; duplicates are found
// once the elements are resolved for a dialect (the lock protocol).
func (k Key) validateSet() error {
	es := Elements(k)
	switch {
	case len(es) == 0:
		return fmt.Errorf("%w: All of no keys (give at least one)", errs.ErrInvalidKey)
	case len(es) > MaxSetKeys:
		return fmt.Errorf("%w: All of %d keys, at most %d are accepted", errs.ErrInvalidKey, len(es), MaxSetKeys)
	}
	for i, e := range es {
		if err := e.Validate(); err != nil {
			return fmt.Errorf("key %d of All: %w", i+1, err)
		}
	}
	return nil
}

func (k Key) validateSemaphore() error {
	if err := Plain(k).Validate(); err != nil {
		return fmt.Errorf("Semaphore: %w", err)
	}
	return nil
}

// shapeString is String of a shape, at most about maxShapeString bytes.
func (k Key) shapeString() string {
	switch {
	case k.kind == kindBad:
		return "<invalid key: " + k.name + ">"
	case k.n != 0:
		return "semaphore(" + bounded(Plain(k).base(), maxShapeString-20) + "," + strconv.Itoa(int(k.n)) + ")"
	case k.kind != kindAll:
		return "shared(" + bounded(Plain(k).base(), maxShapeString-10) + ")"
	}
	var s strings.Builder
	s.WriteString("all(")
	es := Elements(k)
	for i, e := range es {
		if i > 0 {
			s.WriteByte(',')
		}
		part := e.base()
		if e.shared {
			part = "shared(" + part + ")"
		}
		if s.Len()+len(part) > maxShapeString-24 {
			fmt.Fprintf(&s, "…+%d more", len(es)-i)
			break
		}
		s.WriteString(bounded(part, 64))
	}
	s.WriteByte(')')
	return s.String()
}

// bounded cuts s to at most n bytes (at a character boundary), marking the
// cut.
func bounded(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return prefix(s, n) + "…"
}
