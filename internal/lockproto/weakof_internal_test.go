package lockproto

import (
	"runtime"
	"testing"
	"time"
	"unsafe"
	"weak"
)

// WeakOf is weak.Make, made once per object, and its record leaves with the
// object.
func TestWeakOf(t *testing.T) {
	type obj struct{ n [4]int64 }
	p := new(obj)
	wp := WeakOf(p)
	if wp != weak.Make(p) || WeakOf(p) != wp || wp.Value() != p {
		t.Fatal("WeakOf is not weak.Make's pointer")
	}
	key := uintptr(unsafe.Pointer(p))
	runtime.KeepAlive(p)
	p = nil
	for deadline := time.Now().Add(5 * time.Second); ; {
		runtime.GC()
		if _, ok := weakPtrs.Load(key); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the record of a collected object is still there")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if wp.Value() != nil {
		t.Fatal("the weak pointer outlived its object")
	}
}

// BenchmarkWeakOf compares weak.Make and WeakOf on one object from every
// goroutine (the per-pool caches' key): weak.Make takes the object's span
// lock on every call (see the mutex profile), WeakOf none once made.
//
//	go test -run '^$' -bench BenchmarkWeakOf -cpu 1,2 -mutexprofile m.out ./internal/lockproto/
func BenchmarkWeakOf(b *testing.B) {
	p := new(struct{ n [4]int64 })
	b.Run("weak.Make", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = weak.Make(p)
			}
		})
	})
	b.Run("WeakOf", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = WeakOf(p)
			}
		})
	})
}
