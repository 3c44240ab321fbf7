// Package status is what the servers report that the root package names:
// who holds a lock ([HolderInfo]) and the RunOnce ledger's rows ([Run]).
// Each type is defined here once; package ormlock names it by alias
// (ormlock.HolderInfo, ormlock.Run), and its documentation there shows
// every field and says what it means: the contract is stated there, not
// here. The lock protocol (internal/lockproto's LookupHolder) and the
// ledger (internal/ledger) fill them in; no package under internal/
// imports the root (doc.go, Where the types live).
package status

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// HolderInfo says who holds a lock: ormlock.HolderInfo, an alias of this
// type, documents each field per server and what it reveals.
type HolderInfo struct {
	Held    bool
	Dialect string
	Lock    string

	PID         int64
	User        string
	Application string
	Owner       string
	ClientAddr  string
	Database    string
	State       string
	StateFor    time.Duration
	Query       string
	Mode        string

	TxStart   time.Time
	ConnStart time.Time
	HeldFor   time.Duration

	Waiters int

	Key    string
	Shared bool
	Slot   int

	Mechanism string
	Epoch     int64
	ExpiresIn time.Duration
}

// The values of HolderInfo.Mechanism.
const (
	MechAdvisory = "advisory" // a PostgreSQL advisory lock
	MechNamed    = "named"    // a MySQL/MariaDB named lock (GET_LOCK)
	MechLease    = "lease"    // a row of the lease table (WithLease)
)

// String returns the one-line key=value form, without the query, that
// ormlock.HolderInfo's doc shows.
func (h HolderInfo) String() string { return h.format(0) }

// StringWithQuery is String followed by the query, at most limit bytes
// of it (all of it when limit <= 0), quoted.
func (h HolderInfo) StringWithQuery(limit int) string {
	if limit <= 0 {
		limit = max(len(h.Query), 1)
	}
	return h.format(limit)
}

// maxField bounds any other field String prints (they come from the server
// too: application_name is up to 64 bytes, a MySQL state or host short).
const maxField = 256

func (h HolderInfo) format(maxQuery int) string {
	var b strings.Builder
	if !h.Held {
		b.WriteString("free")
		if h.Waiters > 0 {
			b.WriteString(" waiters=")
			b.WriteString(strconv.Itoa(h.Waiters))
		}
		return b.String()
	}
	lease := h.Mechanism == MechLease
	if lease { // no connection holds it, nobody queues for it
		b.WriteString("held lease epoch=")
		b.WriteString(strconv.FormatInt(h.Epoch, 10))
	} else {
		b.WriteString("held pid=")
		b.WriteString(strconv.FormatInt(h.PID, 10))
	}
	field := func(name, v string) {
		if v == "" {
			return
		}
		b.WriteByte(' ')
		b.WriteString(name)
		b.WriteByte('=')
		b.WriteString(quote(v))
	}
	dur := func(name string, d time.Duration) {
		if d > 0 {
			field(name, d.Round(time.Millisecond).String())
		}
	}
	field("key", cut(h.Key, maxField))
	if h.Slot > 0 {
		field("slot", strconv.Itoa(h.Slot))
	}
	if h.Shared && h.Mode == "" {
		field("mode", "shared")
	}
	field("user", cut(h.User, maxField))
	field("owner", cut(h.Owner, maxField))
	if h.Application != h.Owner {
		field("application", cut(h.Application, maxField))
	}
	field("client", cut(h.ClientAddr, maxField))
	field("database", cut(h.Database, maxField))
	field("mode", cut(h.Mode, maxField))
	field("state", cut(h.State, maxField))
	dur("state_for", h.StateFor)
	dur("held_for", h.HeldFor)
	if lease {
		dur("expires_in", h.ExpiresIn)
	} else {
		b.WriteString(" waiters=")
		b.WriteString(strconv.Itoa(h.Waiters))
	}
	if maxQuery > 0 {
		b.WriteString(" query=")
		b.WriteString(strconv.Quote(cut(h.Query, maxQuery)))
	}
	return b.String()
}

// quote returns v as it is when it is made of printable characters other
// than space, '"', '=' and '\' only, else strconv.Quote(v).
func quote(v string) string {
	for _, r := range v {
		if r == ' ' || r == '"' || r == '=' || r == '\\' || r == utf8.RuneError || !strconv.IsPrint(r) {
			return strconv.Quote(v)
		}
	}
	return v
}

// cut returns at most limit bytes of s, cut at a character boundary and
// marked "…" when shortened.
func cut(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	n := limit
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
