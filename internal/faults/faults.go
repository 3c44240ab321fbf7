// Package faults provides the failures that deadline tests need and a real
// server does not produce on demand: a server that accepts connections and
// never answers, and a database backend process frozen with SIGSTOP. It is
// for tests only.
package faults

import (
	"context"
	"database/sql"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Silent starts a TCP listener on loopback that accepts every connection and
// never sends a byte, and returns its "host:port". Listener and connections
// are closed at the end of the test.
func Silent(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("faults: listen: %v", err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	tb.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// Freeze stops the process pid with SIGSTOP and returns a function that
// resumes it (SIGCONT), at most once; the test's cleanup resumes it too.
func Freeze(tb testing.TB, pid int) (resume func()) {
	tb.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		tb.Fatalf("faults: SIGSTOP %d: %v", pid, err)
	}
	var once sync.Once
	resume = func() { once.Do(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) }
	tb.Cleanup(resume)
	return resume
}

// PGBackendPID returns the backend pid of q's PostgreSQL session (behind
// PgBouncer: of the server connection q's transaction runs on).
func PGBackendPID(tb testing.TB, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}) int {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var pid int
	if err := q.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		tb.Fatalf("faults: pg_backend_pid: %v", err)
	}
	return pid
}

// Within fails the test when more than limit passed since start: a call
// that must end by its deadline plus a grace.
func Within(tb testing.TB, what string, start time.Time, limit time.Duration) {
	tb.Helper()
	if d := time.Since(start); d > limit {
		tb.Errorf("%s returned after %v, want within %v", what, d.Round(time.Millisecond), limit)
	}
}
