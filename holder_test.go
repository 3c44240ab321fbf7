package ormlock_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
)

// HolderInfo's lookups against real servers are tested in gormlock
// (holder_test.go); this covers its text form.
func TestHolderInfoString(t *testing.T) {
	for _, c := range []struct {
		h    ormlock.HolderInfo
		want string
	}{
		{ormlock.HolderInfo{Dialect: "postgres"}, "free"},
		{ormlock.HolderInfo{Dialect: "postgres", Waiters: 2}, "free waiters=2"},
		{ormlock.HolderInfo{
			Held: true, Dialect: "postgres", PID: 4242, User: "app", Application: "billing worker",
			ClientAddr: "10.0.0.7:51234", Database: "app", Mode: "ExclusiveLock", State: "idle in transaction",
			StateFor: 1200 * time.Millisecond, HeldFor: 1300*time.Millisecond + 400*time.Microsecond,
			Waiters: 1, Query: `SELECT "x"`,
		}, `held pid=4242 user=app application="billing worker" client=10.0.0.7:51234 database=app mode=ExclusiveLock state="idle in transaction" state_for=1.2s held_for=1.3s waiters=1`},
		{ormlock.HolderInfo{Held: true, Dialect: "mysql", PID: 7, User: "root", ClientAddr: "127.0.0.1:40000", State: "Sleep", StateFor: 3 * time.Second},
			"held pid=7 user=root client=127.0.0.1:40000 state=Sleep state_for=3s waiters=0"},
		{ormlock.HolderInfo{Held: true, Dialect: "postgres", Mechanism: "lease", Epoch: 42, Key: "billing:nightly", Owner: "replica-a",
			Mode: "exclusive", HeldFor: 62500 * time.Millisecond, ExpiresIn: 21300 * time.Millisecond},
			"held lease epoch=42 key=billing:nightly owner=replica-a mode=exclusive held_for=1m2.5s expires_in=21.3s"},
		{ormlock.HolderInfo{Held: true, Dialect: "mysql", Mechanism: "lease", Epoch: 3, Shared: true, Mode: "shared", ExpiresIn: time.Second},
			"held lease epoch=3 mode=shared expires_in=1s"},
		{ormlock.HolderInfo{Dialect: "mysql", Mechanism: "lease"}, "free"},
		{ormlock.HolderInfo{Held: true, Dialect: "mysql", Mechanism: "named", PID: 9}, "held pid=9 waiters=0"},
	} {
		if got := c.h.String(); got != c.want {
			t.Errorf("got  %s\nwant %s", got, c.want)
		}
	}
}

// TestHolderInfoStringEscapes: whatever a holder puts in its
// application_name or query (control characters, ESC sequences, CR, U+2028,
// a secret), String prints one line of printable text without the query,
// and StringWithQuery a bounded, quoted query.
func TestHolderInfoStringEscapes(t *testing.T) {
	hostile := "SELECT/**/'x'/*\x1b]0;pwned\x07\r*/ \v\f\u2028\u2029\u0085 \x7f"
	h := ormlock.HolderInfo{
		Held: true, Dialect: "mysql", PID: 1, User: "u\x1b[2J", Application: "app\rforged",
		State: "Query (x\u2028y)", Database: "d\\b", Query: hostile + " password=hunter2 " + strings.Repeat("q", 70000),
	}
	clean := func(s string) {
		t.Helper()
		for _, r := range s {
			if !strconv.IsPrint(r) {
				t.Errorf("unprintable %U in %q", r, s)
			}
		}
	}
	s := h.String()
	clean(s)
	if strings.Contains(s, "hunter2") || strings.Contains(s, "query=") {
		t.Errorf("String prints the query: %q", s)
	}
	for _, want := range []string{`user="u\x1b[2J"`, `application="app\rforged"`, `state="Query (x\u2028y)"`, `database="d\\b"`} {
		if !strings.Contains(s, want) {
			t.Errorf("String = %s, want %s in it", s, want)
		}
	}
	q := h.StringWithQuery(100)
	clean(q)
	if !strings.HasPrefix(q, s+" query=\"SELECT/**/'x'/*\\x1b]0;pwned\\a\\r*/") || !strings.HasSuffix(q, `…"`) || len(q) > len(s)+200 {
		t.Errorf("StringWithQuery(100) = %s", q)
	}
	if all := h.StringWithQuery(0); !strings.Contains(all, "hunter2") || len(all) < 70000 {
		t.Errorf("StringWithQuery(0) cut the query: %d bytes", len(all))
	}
	if got := (ormlock.HolderInfo{Held: true}).StringWithQuery(10); got != `held pid=0 waiters=0 query=""` {
		t.Errorf("empty query: %s", got)
	}
}

// The owner is printed one way on every server, as owner=: on PostgreSQL
// it is the application_name, which is not printed again; application=
// comes only when it differs from the owner.
func TestHolderInfoStringOwner(t *testing.T) {
	for _, c := range []struct {
		h    ormlock.HolderInfo
		want string
	}{
		{ormlock.HolderInfo{Held: true, Dialect: "postgres", PID: 1, User: "u", Application: "replica-a", Owner: "replica-a"},
			"held pid=1 user=u owner=replica-a waiters=0"},
		{ormlock.HolderInfo{Held: true, Dialect: "mysql", PID: 7, Owner: "replica b"},
			`held pid=7 owner="replica b" waiters=0`},
		{ormlock.HolderInfo{Held: true, Dialect: "postgres", PID: 2, Application: "psql", Owner: "psql"},
			"held pid=2 owner=psql waiters=0"},
		{ormlock.HolderInfo{Held: true, Dialect: "postgres", PID: 3, Application: "a", Owner: "b"},
			"held pid=3 owner=b application=a waiters=0"},
		{ormlock.HolderInfo{Held: true, Dialect: "mysql", PID: 8},
			"held pid=8 waiters=0"},
	} {
		if got := c.h.String(); got != c.want {
			t.Errorf("String() = %q, want %q", got, c.want)
		}
	}
}
