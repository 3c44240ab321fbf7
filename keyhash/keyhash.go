// Package keyhash maps lock names to database lock keys. It implements
// ormlock's key derivation spec v1, a compatibility promise: the keys below
// never change silently, so every version of ormlock, and an operator in
// psql, computes the same key for the same name.
//
// Spec v1:
//
//   - Int64(name): the first 8 bytes of SHA-256(UTF-8 name), read big-endian
//     as a two's-complement int64.
//   - Int64NS(ns, name): the same over ns + 0x00 + name; the empty namespace
//     means none, so Int64NS("", n) == Int64(n).
//   - Pair(ns, name): (int32 of the first 4 bytes of SHA-256(ns), int32 of the
//     first 4 bytes of SHA-256(name)), big-endian, so that pg_locks.classid
//     groups one namespace's locks.
//   - MySQLName(ns, name): name, or ns + ":" + name, when that is at most 64
//     bytes (MySQL's limit for GET_LOCK); otherwise a 64-byte form: the longest
//     prefix of it that fits in 31 bytes without splitting a UTF-8 character,
//     "~", and the first 32 hex digits of SHA-256(ns + 0x00 + name).
//   - SemaphoreSlot(text, i), an addition to v1: the name of slot i, from 1,
//     of ormlock.Semaphore over a key whose text is text (a Name's name, an
//     ID's decimal id, "classid:objid" of a Pair), that is
//     "ormlock.semaphore:" + text + "#" + i in decimal; a name like any
//     other, whose key is Int64NS(ns, slot) on PostgreSQL and MySQLName(ns,
//     slot) on MySQL/MariaDB. It does not depend on the semaphore's count.
//
// Int64 is reproducible in PostgreSQL 11+:
//
//	SELECT ('x' || left(encode(sha256(convert_to(name, 'UTF8')), 'hex'), 16))::bit(64)::bigint;
package keyhash

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"unicode/utf8"
	"unsafe"
)

// SemaphoreSlot returns the lock name of slot i of a semaphore over the key
// whose text is text (see the spec above).
func SemaphoreSlot(text string, i int) string {
	return "ormlock.semaphore:" + text + "#" + strconv.Itoa(i)
}

// MySQLMaxName is the longest lock name MySQL accepts (MariaDB allows 192).
const MySQLMaxName = 64

// Int64 returns the bigint advisory lock key of name.
func Int64(name string) int64 {
	sum := sha256.Sum256(bytesOf(name))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// bytesOf returns the bytes of s without copying; sha256 only reads them.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// Int64NS returns the bigint advisory lock key of name in namespace ns.
func Int64NS(ns, name string) int64 {
	if ns == "" {
		return Int64(name)
	}
	sum := nsSum(ns, name)
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// Pair returns the (classid, objid) advisory lock key of name in namespace ns.
func Pair(ns, name string) (int32, int32) {
	a := sha256.Sum256(bytesOf(ns))
	b := sha256.Sum256(bytesOf(name))
	return int32(binary.BigEndian.Uint32(a[:4])), int32(binary.BigEndian.Uint32(b[:4]))
}

const (
	digestHex = 32
	prefixMax = MySQLMaxName - digestHex - 1
)

// MySQLName returns the GET_LOCK name of name in namespace ns: at most 64
// bytes, valid UTF-8 whenever ns and name are.
func MySQLName(ns, name string) string {
	full := name
	if ns != "" {
		full = ns + ":" + name
	}
	if len(full) <= MySQLMaxName {
		return full
	}
	sum := nsSum(ns, name)
	cut := prefixMax
	for cut > 0 && !utf8.RuneStart(full[cut]) {
		cut--
	}
	buf := make([]byte, 0, MySQLMaxName)
	buf = append(buf, full[:cut]...)
	buf = append(buf, '~')
	buf = hex.AppendEncode(buf, sum[:digestHex/2])
	return string(buf)
}

// nsSum is SHA-256(ns + 0x00 + name), on the stack for common lengths.
func nsSum(ns, name string) [sha256.Size]byte {
	var buf [256]byte
	if n := len(ns) + 1 + len(name); n <= len(buf) {
		copy(buf[:], ns)
		copy(buf[len(ns)+1:], name)
		return sha256.Sum256(buf[:n])
	}
	h := sha256.New()
	h.Write(bytesOf(ns))
	h.Write([]byte{0})
	h.Write(bytesOf(name))
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}
