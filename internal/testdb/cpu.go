package testdb

import (
	"syscall"
	"testing"
	"time"
)

// ReportCPU returns a function that reports the process's own CPU time
// (user and system, the servers excluded) per iteration as cpu-ns/op: on a
// loopback server, where a round trip costs little, it is the client-side
// cost of a call, and less sensitive than ns/op to other load on the
// machine. Call it before b.Loop and defer the result.
func ReportCPU(b *testing.B) func() {
	b.Helper()
	start := processCPU(b)
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64(processCPU(b)-start)/float64(b.N), "cpu-ns/op")
		}
	}
}

func processCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchCalls is the body of one side of a side-by-side benchmark: call, in
// a b.Loop, with allocations and the process's CPU (ReportCPU) reported;
// an error from call fails the benchmark.
func BenchCalls(b *testing.B, call func() error) {
	b.Helper()
	b.ReportAllocs()
	defer ReportCPU(b)()
	for b.Loop() {
		if err := call(); err != nil {
			b.Fatal(err)
		}
	}
}
