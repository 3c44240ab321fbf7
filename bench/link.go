package bench

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Link is an in-process TCP proxy that stands for a network between the
// client and a server: every chunk of bytes it reads from one side is written
// to the other side Delay after it arrived, in each direction, so a round
// trip costs about 2×Delay more than on loopback. Chunks are not held back
// by one another (a delay, not a bandwidth limit): pipelined messages keep
// their spacing.
//
// Go's timers wake about a millisecond late on Linux, far too coarse for a
// quarter of a millisecond, so each direction's writer waits on a timerfd
// (Linux only): the delay overshoots by the kernel's and the scheduler's
// wake-up latency (tens of µs; more on a loaded machine), which
// [MeasureLinkRTT] reports. Buffers are pooled, so the
// proxy adds no heap allocation per message to the process's count once
// warm; its CPU time is the benchmark process's.
type Link struct {
	Delay    time.Duration
	upstream string
	ln       net.Listener

	sent atomic.Int64 // chunks read from clients: the messages they flushed

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	closed  bool
	dialErr error // every failed dial of the upstream; the client saw its connection closed
	wg      sync.WaitGroup
}

// StartLink listens on a free loopback port and forwards every connection to
// upstream (host:port) through a link of the given one-way delay.
func StartLink(upstream string, delay time.Duration) (*Link, error) {
	if delay < 0 {
		return nil, fmt.Errorf("bench: link delay %v is negative", delay)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: link listen: %w", err)
	}
	l := &Link{Delay: delay, upstream: upstream, ln: ln, conns: map[net.Conn]struct{}{}}
	l.wg.Go(l.accept)
	return l, nil
}

// Addr is the address clients connect to instead of the upstream's.
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Close stops accepting, closes every proxied connection and waits for the
// proxy's goroutines. It returns the errors of the upstream dials that
// failed, if any.
func (l *Link) Close() error {
	l.mu.Lock()
	l.closed = true
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	err := l.ln.Close()
	l.wg.Wait()
	return errors.Join(err, l.dialErr)
}

func (l *Link) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		c.Close()
		return false
	}
	l.conns[c] = struct{}{}
	return true
}

func (l *Link) untrack(c net.Conn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
	c.Close()
}

func (l *Link) accept() {
	for {
		client, err := l.ln.Accept()
		if err != nil {
			return
		}
		if !l.track(client) {
			continue
		}
		l.wg.Go(func() {
			defer l.untrack(client)
			server, err := net.DialTimeout("tcp", l.upstream, 10*time.Second)
			if err != nil {
				l.mu.Lock()
				l.dialErr = errors.Join(l.dialErr, err)
				l.mu.Unlock()
				return
			}
			if !l.track(server) {
				return
			}
			defer l.untrack(server)
			var both sync.WaitGroup
			both.Go(func() { l.pipe(server, client, &l.sent) })
			both.Go(func() { l.pipe(client, server, nil) })
			both.Wait()
		})
	}
}

// chunk is bytes read from one side, due on the other side at due.
type chunk struct {
	buf *[]byte
	n   int
	due time.Time
}

var chunkPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// Sent returns how many chunks the link has read from its clients so far:
// the writes (flushes) they made, each of which a client that waits for
// the answer pays a round trip for. A pipelined batch of messages written
// at once is one; a message larger than the 32 KiB buffer, or one the
// kernel splits, counts more.
func (l *Link) Sent() int64 { return l.sent.Load() }

// pipe copies src to dst, each chunk Delay after it was read, counting the
// chunks in sent when it is not nil. When src ends, dst's write side is
// shut once the chunks in flight are written.
func (l *Link) pipe(dst, src net.Conn, sent *atomic.Int64) {
	ch := make(chan chunk, 256)
	done := make(chan struct{})
	timer, terr := newPreciseTimer()
	go func() {
		defer close(done)
		failed := terr != nil
		for c := range ch {
			if !failed {
				if err := timer.sleepUntil(c.due); err != nil {
					failed = true
				} else if _, err := dst.Write((*c.buf)[:c.n]); err != nil {
					failed = true
				}
				if failed {
					src.Close() // unblock the reader
				}
			}
			chunkPool.Put(c.buf)
		}
		if tc, ok := dst.(*net.TCPConn); ok && !failed {
			_ = tc.CloseWrite()
		} else {
			dst.Close()
		}
	}()
	for {
		buf := chunkPool.Get().(*[]byte)
		n, err := src.Read(*buf)
		if n > 0 {
			if sent != nil {
				sent.Add(1)
			}
			ch <- chunk{buf: buf, n: n, due: time.Now().Add(l.Delay)}
		} else {
			chunkPool.Put(buf)
		}
		if err != nil {
			break
		}
	}
	close(ch)
	<-done
	if timer != nil {
		timer.close()
	}
}

// preciseTimer is a Linux timerfd read through Go's network poller: the
// goroutine parks (holding no OS thread and no P) and wakes when the kernel's
// high-resolution timer fires. Go's own timers wake about a millisecond late
// for sub-millisecond waits on Linux, and a sleep in the nanosleep system
// call would hold one of GOMAXPROCS's Ps until the runtime takes it back.
type preciseTimer struct {
	f  *os.File
	fd uintptr
}

// Linux constants for timerfd_create(2).
const (
	clockMonotonic = 1
	tfdNonblock    = 0o4000
	tfdCloexec     = 0o2000000
)

func newPreciseTimer() (*preciseTimer, error) {
	fd, _, e := syscall.Syscall(syscall.SYS_TIMERFD_CREATE, clockMonotonic, tfdNonblock|tfdCloexec, 0)
	if e != 0 {
		return nil, fmt.Errorf("bench: timerfd_create: %w", e)
	}
	return &preciseTimer{f: os.NewFile(fd, "timerfd"), fd: fd}, nil
}

// sleepUntil parks the calling goroutine until t.
func (p *preciseTimer) sleepUntil(t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return nil
	}
	// struct itimerspec { it_interval, it_value }, relative, one shot.
	spec := [4]int64{0, 0, int64(d / time.Second), int64(d % time.Second)}
	if _, _, e := syscall.Syscall6(syscall.SYS_TIMERFD_SETTIME, p.fd, 0, uintptr(unsafe.Pointer(&spec)), 0, 0, 0); e != 0 {
		return fmt.Errorf("bench: timerfd_settime: %w", e)
	}
	var expirations [8]byte
	_, err := p.f.Read(expirations[:])
	return err
}

func (p *preciseTimer) close() { p.f.Close() }

// LinkRTT is the round-trip time of a link, measured with 1-byte pings to an
// echo server behind it.
type LinkRTT struct {
	Delay         time.Duration // the one-way delay asked for
	P10, P50, P90 time.Duration
	Pings         int
}

func (r LinkRTT) String() string {
	return fmt.Sprintf("one-way delay %v: measured round trip p50 %v (p10 %v, p90 %v, %d pings)",
		r.Delay, r.P50.Round(time.Microsecond), r.P10.Round(time.Microsecond), r.P90.Round(time.Microsecond), r.Pings)
}

// MeasureLinkRTT measures the round trip of a link of the given delay: n
// one-byte pings through it to an in-process echo server.
func MeasureLinkRTT(delay time.Duration, n int) (LinkRTT, error) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return LinkRTT{}, err
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	l, err := StartLink(echo.Addr().String(), delay)
	if err != nil {
		return LinkRTT{}, err
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr())
	if err != nil {
		return LinkRTT{}, err
	}
	defer c.Close()
	rtts := make([]time.Duration, 0, n)
	b := []byte{1}
	for range n {
		t0 := time.Now()
		if _, err := c.Write(b); err != nil {
			return LinkRTT{}, err
		}
		if _, err := io.ReadFull(c, b); err != nil {
			return LinkRTT{}, err
		}
		rtts = append(rtts, time.Since(t0))
	}
	slices.Sort(rtts)
	return LinkRTT{Delay: delay, P10: rtts[n/10], P50: rtts[n/2], P90: rtts[n*9/10], Pings: n}, nil
}

// Links routes SQL targets through links of one delay: one [Link] per
// distinct server address.
type Links struct {
	Delay time.Duration
	links map[string]*Link
}

// NewLinks returns an empty set of links of the given one-way delay.
func NewLinks(delay time.Duration) *Links {
	return &Links{Delay: delay, links: map[string]*Link{}}
}

// Route returns t with its DSN pointing at a link to t's server (started on
// first use). Redis targets are returned as they are.
func (ls *Links) Route(t Target) (Target, error) {
	if t.Dialect == Redis {
		return t, nil
	}
	host, rewrite, err := dsnHost(t)
	if err != nil {
		return t, err
	}
	l := ls.links[host]
	if l == nil {
		if l, err = StartLink(host, ls.Delay); err != nil {
			return t, err
		}
		ls.links[host] = l
	}
	t.DSN = rewrite(l.Addr())
	return t, nil
}

// Of returns the link that t, a target Route returned, goes through (nil
// for one that goes through none).
func (ls *Links) Of(t Target) *Link {
	host, _, err := dsnHost(t)
	if err != nil {
		return nil
	}
	for _, l := range ls.links {
		if l.Addr() == host {
			return l
		}
	}
	return nil
}

// Close closes every link.
func (ls *Links) Close() error {
	var errs []error
	for _, l := range ls.links {
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}

// dsnHost returns the host:port of a SQL target's DSN and a function that
// returns the DSN with another host:port. PostgreSQL DSNs must be URLs
// (postgres://...); MySQL DSNs are go-sql-driver's (user@tcp(host:port)/db).
func dsnHost(t Target) (string, func(string) string, error) {
	if t.Dialect == MySQL {
		i := strings.Index(t.DSN, "@tcp(")
		if i < 0 {
			return "", nil, fmt.Errorf("bench: MySQL DSN of %s has no @tcp(host:port)", t.Name)
		}
		rest := t.DSN[i+len("@tcp("):]
		j := strings.IndexByte(rest, ')')
		if j < 0 {
			return "", nil, fmt.Errorf("bench: MySQL DSN of %s has no closing ) after tcp(", t.Name)
		}
		host := rest[:j]
		return host, func(addr string) string { return t.DSN[:i] + "@tcp(" + addr + rest[j:] }, nil
	}
	u, err := url.Parse(t.DSN)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
		return "", nil, fmt.Errorf("bench: the PostgreSQL DSN of %s must be a postgres:// URL with a host to route it through a link", t.Name)
	}
	host := u.Host
	return host, func(addr string) string { v := *u; v.Host = addr; return v.String() }, nil
}
