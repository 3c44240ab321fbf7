package pgxdriver

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestProbeDialsOnce: the multiplexer probe opens one connection to the
// check's server and nothing after it. A server at its connection limit
// closes the probe's connection at once (as pglite-socket with
// --max-connections=1 does while the check holds its only slot); pgx
// answers that with a CancelRequest on a new connection from a goroutine
// of its own, which, let out, took the freed slot from the pool's next
// client. The listener here is such a server; the settings name another
// port, and the probe dials the server it is given.
func TestProbeDialsOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			_ = c.Close()
		}
	}()
	elsewhere, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := elsewhere.Addr().(*net.TCPAddr).Port
	_ = elsewhere.Close() // a port nothing listens on
	cfg, err := pgconn.ParseConfig("postgres://postgres@127.0.0.1:" + strconv.Itoa(port) + "/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	if pid, err := probePID(context.Background(), cfg, ln.Addr()); err == nil {
		t.Fatalf("probePID on a server that closes every connection: pid %d, want an error", pid)
	}
	time.Sleep(500 * time.Millisecond) // pgx's cancel goroutine starts at once
	if n := accepted.Load(); n != 1 {
		t.Errorf("the probe opened %d connections to the server, want 1 (its own, no CancelRequest after it)", n)
	}
}
