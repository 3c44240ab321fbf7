package lockproto

import (
	"runtime"
	"sync"
	"unsafe"
	"weak"
)

// The per-pool caches (the server check's verdicts, pgxlock's stand-in
// per pool) are keyed by weak pointers, so that a pool that is garbage
// collected leaves them. weak.Make takes a runtime lock of the object's
// memory span on every call, one lock per pool shared by every goroutine
// that calls on it: at hundreds of goroutines on many cores, the calls on
// one pool queued there. WeakOf makes the weak pointer once per object
// and finds it again by address, lock-free.

// weakPtrs holds the weak pointer of each object WeakOf was asked for,
// by the object's address, until the object is collected.
var weakPtrs sync.Map // uintptr -> weak.Pointer[T]

// WeakOf returns weak.Make(p), made once per object p and found again
// without a lock: by p's address, checked to still point at p (a
// collected object's address may be reused by a new one, whose weak
// pointer is then made afresh).
func WeakOf[T any](p *T) weak.Pointer[T] {
	key := uintptr(unsafe.Pointer(p))
	if v, ok := weakPtrs.Load(key); ok {
		if wp, ok := v.(weak.Pointer[T]); ok && wp.Value() == p {
			return wp
		}
	}
	wp := weak.Make(p)
	weakPtrs.Store(key, wp)
	runtime.AddCleanup(p, func(key uintptr) { weakPtrs.CompareAndDelete(key, wp) }, key)
	return wp
}
