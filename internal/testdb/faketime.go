package testdb

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// fakeTimeHint says how to install libfaketime.
const fakeTimeHint = `install it with "apt-get install -y faketime" (or run "make test", which installs it)`

// fakeTimeLib finds Debian's libfaketime for threaded programs (package
// libfaketime, a dependency of faketime), "" when it is not installed.
func fakeTimeLib() string {
	m, _ := filepath.Glob("/usr/lib/*/faketime/libfaketimeMT.so.1")
	if len(m) == 0 {
		return ""
	}
	return m[0]
}

// Clock is the clock of a server started under libfaketime (StartFaked,
// GaleraConfig.FakeClocks, PGReplicationConfig.FakeStandbyClock): the
// machine's time plus an offset that a test sets while the server runs.
// The server process preloads libfaketime with FAKETIME_TIMESTAMP_FILE
// (the offset, re-read on every call: FAKETIME_NO_CACHE) and
// FAKETIME_DONT_FAKE_MONOTONIC, so its wall clock (clock_timestamp(),
// NOW(6), SYSDATE(6)) moves as the offset says while its timeouts, on the
// monotonic clock, do not jump.
type Clock struct {
	srv  *Server
	path string

	mu     sync.Mutex
	offset time.Duration
}

// fakeClock makes s start under libfaketime with a clock at the machine's
// time; call it before s starts.
func (s *Server) fakeClock() error {
	lib := fakeTimeLib()
	if lib == "" {
		return fmt.Errorf("testdb: %s: %w (libfaketime); %s", s.kind, ErrMissingBinaries, fakeTimeHint)
	}
	c := &Clock{srv: s, path: filepath.Join(s.dir, "faketime")}
	if err := c.write(0); err != nil {
		return err
	}
	s.clock = c
	s.env = append(s.env, "LD_PRELOAD="+lib, "FAKETIME_TIMESTAMP_FILE="+c.path,
		"FAKETIME_NO_CACHE=1", "FAKETIME_DONT_FAKE_MONOTONIC=1")
	return nil
}

// Clock is the server's libfaketime clock, nil for a server started
// without one. For a PgBouncer server it is its PostgreSQL's.
func (s *Server) Clock() *Clock {
	if s.clock == nil && s.backend != nil {
		return s.backend.clock
	}
	return s.clock
}

// StartFaked starts a private server of kind k under libfaketime (see
// Clock), stopped and removed in tb.Cleanup: for PgBouncer, a private
// PgBouncer in front of a private PostgreSQL whose clock it is. A missing
// libfaketime skips the test, or fails it under CI.
func StartFaked(tb testing.TB, k Kind) *Server {
	tb.Helper()
	s, err := startFaked(k, findBinaries(k, true))
	return stopAtCleanup(tb, s, err)
}

func startFaked(k Kind, b binaries) (*Server, error) {
	if err := b.err(k); err != nil {
		return nil, err
	}
	inner := k
	if k == PgBouncer {
		inner = Postgres
	}
	s, err := newServer(inner, b, pgTarget{})
	if err != nil {
		return nil, err
	}
	if err = s.fakeClock(); err == nil {
		err = s.start(false)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	if k != PgBouncer {
		return s, nil
	}
	pb, err := startServer(PgBouncer, b, s.asTarget())
	if err != nil {
		s.Close()
		return nil, err
	}
	pb.backend = s
	return pb, nil
}

// write makes the offset file say d (atomically: the server reads it at
// every call).
func (c *Clock) write(d time.Duration) error {
	tmp := c.path + ".tmp"
	if err := os.WriteFile(tmp, fmt.Appendf(nil, "%+.6f\n", d.Seconds()), 0o644); err != nil {
		return fmt.Errorf("testdb: faketime: %w", err)
	}
	if err := os.Rename(tmp, c.path); err != nil {
		return fmt.Errorf("testdb: faketime: %w", err)
	}
	c.mu.Lock()
	c.offset = d
	c.mu.Unlock()
	return nil
}

// Offset is the offset last set: how far the server's clock is ahead of
// the machine's (behind when negative).
func (c *Clock) Offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset
}

// Set moves the server's clock to the machine's time plus d while it
// runs, and waits up to 10 s until the server's own clock shows it
// (Skew within 250 ms of d, more when a query's round trip is longer).
func (c *Clock) Set(tb testing.TB, d time.Duration) {
	tb.Helper()
	if err := c.write(d); err != nil {
		tb.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		skew, rtt, err := c.srv.skew()
		if err == nil {
			tol := max(250*time.Millisecond, rtt/2+50*time.Millisecond)
			if skew > d-tol && skew < d+tol {
				return
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("testdb: %s on port %d: clock offset %v set, the server's clock is %v off the machine's after 10s (err %v)",
				c.srv.kind, c.srv.port, d, skew, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Step moves the server's clock by d more (forward when positive) while
// it runs; see Set.
func (c *Clock) Step(tb testing.TB, d time.Duration) {
	tb.Helper()
	c.Set(tb, c.Offset()+d)
}

// Skew measures how far the server's wall clock (clock_timestamp() on
// PostgreSQL, SYSDATE(6) on MariaDB: the time of the call, not of the
// statement's start) is ahead of the machine's, against the middle of the
// query's round trip. It works on any server of this package, faked or
// not.
func (s *Server) Skew(tb testing.TB) time.Duration {
	tb.Helper()
	d, _, err := s.skew()
	if err != nil {
		tb.Fatalf("testdb: %s: read the server's clock: %v", s.kind, err)
	}
	return d
}

func (s *Server) skew() (skew, rtt time.Duration, err error) {
	db, err := s.adminDB()
	if err != nil {
		return 0, 0, err
	}
	q := "SELECT UNIX_TIMESTAMP(SYSDATE(6))"
	if s.kind != MariaDB {
		q = "SELECT extract(epoch FROM clock_timestamp())::float8"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var secs float64
	t0 := time.Now()
	err = db.QueryRowContext(ctx, q).Scan(&secs)
	t1 := time.Now()
	if err != nil {
		return 0, 0, err
	}
	rtt = t1.Sub(t0)
	mid := t0.Add(rtt / 2)
	server := time.Unix(0, int64(secs*1e9))
	return server.Sub(mid), rtt, nil
}
