package testdb

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

// A Proxy that reads its clients' protocol can hold the server's replies to
// chosen statements: a link that is slow for those statements only (a
// lock statement whose answer takes 800 ms while every other statement
// answers at once), which deadline tests need to tell a bound per
// statement from a bound per call.

// replyDelay is DelayReplies' rule.
type replyDelay struct {
	match func(sql string) bool
	d     time.Duration
}

// StartProtocolProxy is StartProxy for clients speaking kind k's protocol
// (Postgres and PgBouncer: PostgreSQL's; MariaDB: MySQL's), whose
// statements DelayReplies can then recognise. TLS and the MySQL compressed
// protocol are not read: use it with the plain connections testdb's DSNs
// make.
func StartProtocolProxy(tb testing.TB, k Kind, upstream string) *Proxy {
	tb.Helper()
	if !k.valid() {
		tb.Fatalf("testdb: proxy for unknown kind %q", k)
	}
	return startProxy(tb, upstream, k)
}

// ProxyDSN starts a protocol proxy (StartProtocolProxy) in front of kind
// k's shared server (or its ORMLOCK_TEST_*_DSN) and returns it with the
// DSN that reaches the server through it. A DSN whose address cannot be
// rewritten skips the test (fails it when CI is set).
func ProxyDSN(tb testing.TB, k Kind) (*Proxy, string) {
	tb.Helper()
	d := DSN(tb, k)
	addr, rewrite, err := dsnAddr(d)
	if err != nil {
		msg := fmt.Sprintf("testdb: cannot put a proxy in front of DSN %q: %v", d, err)
		if os.Getenv("CI") != "" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	p := StartProtocolProxy(tb, k, addr)
	return p, rewrite(p.Addr())
}

// dsnAddr finds the server address in a go-sql-driver/mysql DSN
// ("user@tcp(host:port)/db?...") or a PostgreSQL URL, and returns it with
// the function that rewrites the DSN to another address.
func dsnAddr(dsn string) (string, func(addr string) string, error) {
	if i := strings.Index(dsn, "@tcp("); i >= 0 {
		j := strings.Index(dsn[i:], ")")
		if j < 0 {
			return "", nil, fmt.Errorf("no closing parenthesis after tcp(")
		}
		addr := dsn[i+len("@tcp(") : i+j]
		return addr, func(a string) string { return dsn[:i] + "@tcp(" + a + dsn[i+j:] }, nil
	}
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
		return "", nil, fmt.Errorf("neither a MySQL DSN with tcp(...) nor a postgres:// URL with a host")
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "5432")
	}
	return addr, func(a string) string {
		v := *u
		v.Host = a
		return v.String()
	}, nil
}

// DelayReplies makes the proxy (made by StartProtocolProxy) hold for d the
// server's reply to every statement whose SQL text match accepts, on every
// connection, those made before included. The statement itself goes
// through at once: the server has run it (taken a lock, say) while its
// client still waits for the answer. A statement is a MySQL COM_QUERY, or
// the COM_STMT_EXECUTE of a statement prepared (COM_STMT_PREPARE) with a
// matching text; a PostgreSQL simple Query, or the extended protocol's
// Bind of a statement parsed with a matching text, whose reply is held from
// the Sync that follows. Preparing one is not delayed. A nil match or d 0
// stops holding replies (a reply already held is still held for its d).
func (p *Proxy) DelayReplies(match func(sql string) bool, d time.Duration) {
	if p.proto == "" {
		panic("testdb: DelayReplies on a proxy that does not read the protocol (use StartProtocolProxy)")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if match == nil || d <= 0 {
		p.delay = replyDelay{}
		return
	}
	p.delay = replyDelay{match: match, d: d}
}

// Matched returns when each statement that DelayReplies matched was passed
// on to the server, in order, since the proxy started.
func (p *Proxy) Matched() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.matched...)
}

// rule is the current rule, read once per chunk.
func (p *Proxy) rule() replyDelay {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delay
}

// relay reads a chunk on its way (up: from the client) and, going down,
// holds it when it starts a reply DelayReplies holds. It returns what to
// pass on (the chunk, or up with RefuseQueries on, the whole commands not
// refused) and false when the pair closed while the reply was held.
func (p *Proxy) relay(pp *proxyPair, chunk []byte, up bool) ([]byte, bool) {
	w := pp.wire
	if up {
		r := p.rule()
		p.mu.Lock()
		refuse, errno := p.refuse, p.refuseErrno
		p.mu.Unlock()
		pp.mu.Lock()
		var held []byte // bytes read but not passed on, as refusing stops
		switch {
		case refuse != nil && w.refuse == nil:
			w.skip = len(w.buf) // passed on already
		case refuse == nil && w.refuse != nil:
			held = append(held, w.buf...)
		}
		w.refuse, w.errno = refuse, errno
		n := w.read(chunk, r.match)
		if n > 0 {
			w.hold = r.d
		}
		cmds, out, answers := w.cmds, chunk, w.answers
		switch {
		case refuse != nil:
			out = w.out
		case held != nil:
			out = append(held, chunk...)
		}
		w.cmds, w.out, w.answers = nil, nil, nil
		pp.mu.Unlock()
		if len(cmds) > 0 || n > 0 {
			now := time.Now()
			p.mu.Lock()
			p.cmds = append(p.cmds, cmds...)
			for range n {
				p.matched = append(p.matched, now)
			}
			p.mu.Unlock()
		}
		if len(answers) > 0 {
			if _, err := pp.a.Write(answers); err != nil {
				return nil, false
			}
		}
		return out, true
	}
	pp.mu.Lock()
	w.reply(chunk)
	d := w.hold
	w.hold = 0
	pp.mu.Unlock()
	if d <= 0 {
		return chunk, true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return chunk, true
	case <-pp.done:
		return nil, false
	}
}

// wireState is what a proxy pair knows of its client's protocol.
type wireState struct {
	kind Kind
	buf  []byte        // client bytes not yet read as whole messages
	hold time.Duration // the next reply is held this long
	conn int           // the proxy's number for the connection
	cmds []Command     // commands read and not yet handed to the proxy (MySQL)
	// RefuseQueries (MySQL): the rule, the whole messages to pass on, and
	// the error packets to answer the client with
	refuse  func(sql string) bool
	out     []byte
	answers []byte
	errno   uint16
	skip    int // bytes at the head of buf passed on before refusing began

	// MySQL
	prepared bool            // a matching COM_STMT_PREPARE awaits its statement id
	reply0   []byte          // the start of that reply
	stmts    map[uint32]bool // statement ids prepared with a matching text

	// PostgreSQL
	started bool            // the untyped start-up messages are past
	named   map[string]bool // statements parsed with a matching text
	bound   bool            // a Bind of one since the last Sync
}

func newWireState(k Kind) *wireState {
	return &wireState{kind: k, stmts: map[uint32]bool{}, named: map[string]bool{}}
}

// read takes in a chunk from the client and returns how many statements
// whose reply is to be held it completed (match nil: none is).
func (w *wireState) read(chunk []byte, match func(string) bool) int {
	w.buf = append(w.buf, chunk...)
	n := 0
	for {
		size, held, ok := w.next(match)
		if !ok {
			break
		}
		if held {
			n++
		}
		if w.refuse != nil && (w.skip > 0 || !w.refused(w.buf[:size])) {
			w.out = append(w.out, w.buf[min(w.skip, size):size]...)
		}
		w.skip = max(w.skip-size, 0)
		w.buf = w.buf[size:]
	}
	if len(w.buf) == 0 {
		w.buf = nil // let a large message's buffer go
	}
	return n
}

// next reads the first whole message of w.buf: its size, whether its
// reply is held, and false when it is not whole yet.
func (w *wireState) next(match func(string) bool) (int, bool, bool) {
	if w.kind == MariaDB {
		return w.nextMySQL(match)
	}
	return w.nextPostgres(match)
}

// nextMySQL reads a MySQL packet: 3 bytes of length, a sequence number, the
// payload. A command is a packet with sequence number 0.
func (w *wireState) nextMySQL(match func(string) bool) (int, bool, bool) {
	b := w.buf
	if len(b) < 4 {
		return 0, false, false
	}
	size := 4 + (int(b[0]) | int(b[1])<<8 | int(b[2])<<16)
	if len(b) < size {
		return 0, false, false
	}
	payload := b[4:size]
	if b[3] != 0 || len(payload) == 0 {
		return size, false, true
	}
	c := mysqlCommand(payload)
	c.Conn = w.conn
	w.cmds = append(w.cmds, c)
	switch payload[0] {
	case 0x03: // COM_QUERY
		return size, match != nil && match(string(payload[1:])), true
	case 0x16: // COM_STMT_PREPARE
		w.prepared, w.reply0 = match != nil && match(string(payload[1:])), nil
	case 0x17: // COM_STMT_EXECUTE
		if len(payload) >= 5 {
			return size, match != nil && w.stmts[binary.LittleEndian.Uint32(payload[1:5])], true
		}
	case 0x19: // COM_STMT_CLOSE
		if len(payload) >= 5 {
			delete(w.stmts, binary.LittleEndian.Uint32(payload[1:5]))
		}
	}
	return size, false, true
}

// nextPostgres reads a PostgreSQL message: the untyped start-up ones
// (length, code), then a type byte and a length that counts itself.
func (w *wireState) nextPostgres(match func(string) bool) (int, bool, bool) {
	b := w.buf
	if !w.started {
		if len(b) < 8 {
			return 0, false, false
		}
		size := int(binary.BigEndian.Uint32(b[:4]))
		if size < 8 {
			return len(b), false, true // not the protocol: skip what came
		}
		if len(b) < size {
			return 0, false, false
		}
		switch binary.BigEndian.Uint32(b[4:8]) {
		case 80877103, 80877104: // SSLRequest, GSSENCRequest: another start-up message follows
		default: // StartupMessage (or CancelRequest, after which nothing follows)
			w.started = true
		}
		return size, false, true
	}
	if len(b) < 5 {
		return 0, false, false
	}
	size := 1 + int(binary.BigEndian.Uint32(b[1:5]))
	if size < 5 {
		return len(b), false, true // not the protocol: skip what came
	}
	if len(b) < size {
		return 0, false, false
	}
	body := b[5:size]
	switch b[0] {
	case 'Q':
		return size, match != nil && match(cstring(body)), true
	case 'P':
		name := cstring(body)
		rest := body[min(len(name)+1, len(body)):]
		if match != nil && match(cstring(rest)) {
			w.named[name] = true
		} else {
			delete(w.named, name)
		}
	case 'B':
		portal := cstring(body)
		rest := body[min(len(portal)+1, len(body)):]
		if w.named[cstring(rest)] {
			w.bound = true
		}
	case 'S':
		held := w.bound && match != nil
		w.bound = false
		return size, held, true
	case 'C':
		if len(body) > 0 && body[0] == 'S' {
			delete(w.named, cstring(body[1:]))
		}
	}
	return size, false, true
}

// reply reads a chunk of the server's reply: on MySQL, the statement id
// of a matching COM_STMT_PREPARE's answer (0x00, then the id).
func (w *wireState) reply(chunk []byte) {
	if !w.prepared {
		return
	}
	w.reply0 = append(w.reply0, chunk...)
	if len(w.reply0) < 9 {
		return
	}
	if w.reply0[4] == 0x00 {
		w.stmts[binary.LittleEndian.Uint32(w.reply0[5:9])] = true
	}
	w.prepared, w.reply0 = false, nil
}

// cstring is b up to its first NUL byte.
func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
