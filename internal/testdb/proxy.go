package testdb

import (
	"net"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy on loopback that stands for a network link a test
// can break: Freeze holds every byte of the connections made so far, in
// both directions, with the connections left open (a partition that the
// peers only notice by their timeouts; connections made after it flow),
// Cut closes every connection made so far (a reset), and
// SetUpstream sends the connections made after it elsewhere (a virtual IP
// or a DNS name moved to a promoted server). Replication topologies put
// one on the standby's primary_conninfo; clients of a failover test reach
// the primary through one. A proxy that reads its clients' protocol
// (StartProtocolProxy) can also hold the server's replies to chosen
// statements (DelayReplies, in replydelay.go).
type Proxy struct {
	ln    net.Listener
	wg    sync.WaitGroup
	proto Kind // the protocol DelayReplies reads; "": bytes only

	mu          sync.Mutex
	upstream    string
	gate        chan struct{} // non-nil while frozen; closed by Thaw
	pairs       map[*proxyPair]struct{}
	closed      bool
	delay       replyDelay            // DelayReplies' rule
	matched     []time.Time           // when each statement it matched went to the server
	cmds        []Command             // the clients' commands (cmdcount.go)
	refuse      func(sql string) bool // RefuseQueries' rule
	refuseErrno uint16
	conns       int // client connections accepted
}

type proxyPair struct {
	a    net.Conn
	done chan struct{}
	once sync.Once

	mu   sync.Mutex
	b    net.Conn      // the upstream side, once dialled
	gate chan struct{} // set by Freeze, closed by Thaw

	wire *wireState // the client's protocol, read when the proxy has one
}

func (p *proxyPair) frozen() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gate
}

func (p *proxyPair) close() {
	p.once.Do(func() {
		close(p.done)
		p.a.Close()
		p.mu.Lock()
		if p.b != nil {
			p.b.Close()
		}
		p.mu.Unlock()
	})
}

// setUpstream records the dialled side, false when the pair was cut
// meanwhile (s is closed then).
func (p *proxyPair) setUpstream(s net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		s.Close()
		return false
	default:
	}
	p.b = s
	return true
}

// StartProxy listens on a free loopback port and forwards every connection
// to upstream (host:port). It is closed in tb.Cleanup.
func StartProxy(tb testing.TB, upstream string) *Proxy {
	tb.Helper()
	return startProxy(tb, upstream, "")
}

// startProxy is StartProxy reading the protocol of kind proto ("": none).
func startProxy(tb testing.TB, upstream string, proto Kind) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("testdb: proxy listen: %v", err)
	}
	p := &Proxy{ln: ln, upstream: upstream, proto: proto, pairs: map[*proxyPair]struct{}{}}
	p.wg.Go(p.accept)
	tb.Cleanup(p.Close)
	return p
}

// Addr is the "127.0.0.1:port" clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's port on 127.0.0.1.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// SetUpstream makes the connections accepted from now on go to addr;
// those made before keep their server (Cut ends them).
func (p *Proxy) SetUpstream(addr string) {
	p.mu.Lock()
	p.upstream = addr
	p.mu.Unlock()
}

// Freeze stops every byte in both directions on the connections made so
// far, until Thaw; nothing is closed, and connections made after it flow.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate == nil {
		p.gate = make(chan struct{})
	}
	for pp := range p.pairs {
		pp.mu.Lock()
		if pp.gate == nil {
			pp.gate = p.gate
		}
		pp.mu.Unlock()
	}
}

// Thaw lets the bytes held by Freeze through, in order.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate == nil {
		return
	}
	close(p.gate)
	p.gate = nil
	for pp := range p.pairs {
		pp.mu.Lock()
		pp.gate = nil
		pp.mu.Unlock()
	}
}

// Cut closes every connection made so far, both sides.
func (p *Proxy) Cut() {
	p.mu.Lock()
	pairs := make([]*proxyPair, 0, len(p.pairs))
	for pp := range p.pairs {
		pairs = append(pairs, pp)
	}
	p.mu.Unlock()
	for _, pp := range pairs {
		pp.close()
	}
}

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	if p.gate != nil {
		close(p.gate)
		p.gate = nil
	}
	p.mu.Unlock()
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		pp := &proxyPair{a: c, done: make(chan struct{})}
		p.mu.Lock()
		p.conns++
		if p.proto != "" {
			pp.wire = newWireState(p.proto)
			pp.wire.conn = p.conns
		}
		if p.closed {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.pairs[pp] = struct{}{}
		up := p.upstream
		p.mu.Unlock()
		p.wg.Go(func() {
			defer func() {
				pp.close()
				p.mu.Lock()
				delete(p.pairs, pp)
				p.mu.Unlock()
			}()
			s, err := net.DialTimeout("tcp", up, 5*time.Second)
			if err != nil {
				return
			}
			if !pp.setUpstream(s) {
				return
			}
			var both sync.WaitGroup
			both.Go(func() { p.pipe(pp, s, c, true) })
			both.Go(func() { p.pipe(pp, c, s, false) })
			both.Wait()
		})
	}
}

// pipe copies from src to dst (up: client to server), each chunk waiting
// while the proxy is frozen, and, on a proxy that reads the protocol, a
// server's reply held as DelayReplies says; it closes the pair when either
// side ends.
func (p *Proxy) pipe(pp *proxyPair, dst, src net.Conn, up bool) {
	defer pp.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if g := pp.frozen(); g != nil {
				select {
				case <-g:
				case <-pp.done:
					return
				}
			}
			out := buf[:n]
			if pp.wire != nil {
				var ok bool
				if out, ok = p.relay(pp, out, up); !ok {
					return
				}
			}
			if _, werr := dst.Write(out); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// hostPort is "127.0.0.1:port".
func hostPort(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }
