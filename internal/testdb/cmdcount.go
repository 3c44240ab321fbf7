package testdb

import (
	"encoding/binary"
	"strconv"
)

// A protocol proxy (StartProtocolProxy) on MariaDB also records the
// commands its clients send: what a round-trip count asserts. A command is
// a client packet with sequence number 0 (the handshake's are not); every
// command but COM_STMT_CLOSE, COM_STMT_SEND_LONG_DATA and COM_QUIT is
// answered, so a call's round trips are its answered commands.

// Command is one command a client sent through a protocol proxy.
type Command struct {
	Conn int    // the proxy's number for the client connection, from 1
	Name string // Query, Prepare, Execute, Close, Ping, Reset, Quit, ... or its code
	SQL  string // the text of a Query or a Prepare; an Execute's statement id
	// Answered reports whether the server replies to it (a round trip).
	Answered bool
}

// String is the command as a test's log shows it.
func (c Command) String() string {
	if c.SQL == "" {
		return c.Name
	}
	return c.Name + ": " + c.SQL
}

// Commands returns the commands the proxy's clients sent since it started
// or since the last ResetCommands, in the order they reached the proxy
// (MariaDB's protocol only; a PostgreSQL proxy records none).
func (p *Proxy) Commands() []Command {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Command(nil), p.cmds...)
}

// ResetCommands forgets the commands recorded so far.
func (p *Proxy) ResetCommands() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cmds = nil
}

// RoundTrips is the number of answered commands in cmds.
func RoundTrips(cmds []Command) int {
	n := 0
	for _, c := range cmds {
		if c.Answered {
			n++
		}
	}
	return n
}

// mysqlCommand describes the command packet payload (its first byte the
// command code).
func mysqlCommand(payload []byte) Command {
	c := Command{Answered: true}
	switch payload[0] {
	case 0x01:
		c.Name, c.Answered = "Quit", false
	case 0x02:
		c.Name, c.SQL = "InitDB", string(payload[1:])
	case 0x03:
		c.Name, c.SQL = "Query", string(payload[1:])
	case 0x0e:
		c.Name = "Ping"
	case 0x16:
		c.Name, c.SQL = "Prepare", string(payload[1:])
	case 0x17:
		c.Name = "Execute"
		if len(payload) >= 5 {
			c.SQL = "statement " + strconv.FormatUint(uint64(binary.LittleEndian.Uint32(payload[1:5])), 10)
		}
	case 0x18:
		c.Name, c.Answered = "SendLongData", false
	case 0x19:
		c.Name, c.Answered = "Close", false
	case 0x1a:
		c.Name = "ResetStmt"
	case 0x1f:
		c.Name = "ResetConnection"
	case 0x11:
		c.Name = "ChangeUser"
	default:
		c.Name = "0x" + strconv.FormatUint(uint64(payload[0]), 16)
	}
	return c
}

// RefuseQueries makes the proxy (MariaDB's protocol) answer every
// COM_QUERY whose text match accepts with an error packet (errno, SQLSTATE
// HY000, "testdb: statement refused by the proxy") instead of passing it to the
// server: a statement that fails on a connection that stays alive, and
// whose session keeps what it held (a release that fails, say). A nil
// match stops refusing. While it is set, the proxy passes its clients'
// bytes on by whole commands.
func (p *Proxy) RefuseQueries(match func(sql string) bool, errno uint16) {
	if p.proto != MariaDB {
		panic("testdb: RefuseQueries on a proxy that does not read MariaDB's protocol")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse, p.refuseErrno = match, errno
}

// refused reports whether the whole packet pkt is a command RefuseQueries
// refuses, and queues its error packet.
func (w *wireState) refused(pkt []byte) bool {
	if len(pkt) < 5 || pkt[3] != 0 || pkt[4] != 0x03 || !w.refuse(string(pkt[5:])) {
		return false
	}
	msg := "#HY000testdb: statement refused by the proxy"
	size := 3 + len(msg)
	w.answers = append(w.answers, byte(size), byte(size>>8), byte(size>>16), 1, 0xff, byte(w.errno), byte(w.errno>>8))
	w.answers = append(w.answers, msg...)
	if n := len(w.cmds); n > 0 {
		w.cmds[n-1].Name, w.cmds[n-1].Answered = "Query (refused by the proxy)", true
	}
	return true
}
