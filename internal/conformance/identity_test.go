package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

// One server lock has one identity in the process's reservation table of
// shared lock connections, whichever path names it: a plain key, an item
// of All, a slot of a Semaphore, spelt in another case. Two Sessions of
// one process on one shared connection (reentrant session-level locks)
// must never both hold it: the second is refused in the process.
func TestSharedLockConnsOneIdentity(t *testing.T) {
	forEachDirect(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := a.with(t, k)
		opts := []ormlock.Option{ormlock.WithSharedLockConns(1)}
		u := fmt.Sprintf("%s-%s-%d", a.name, k, time.Now().UnixNano())
		cases := []struct {
			name          string
			first, second ormlock.Key
			caseOnly      bool // one lock only where names meet whatever their case
		}{
			{"upper-case name, then All", ormlock.Name("Job-" + u), ormlock.All("Job-"+u, "Other-"+u), false},
			{"All, then upper-case name", ormlock.All("Job2-"+u, "Other2-"+u), ormlock.Name("Job2-" + u), false},
			{"non-ASCII name, then All", ormlock.Name("Café-Straße-" + u), ormlock.All("Zürich-"+u, "Café-Straße-"+u), false},
			{"slot name, then Semaphore", ormlock.Name("ormlock.semaphore:Exp-" + u + "#1"), ormlock.Semaphore("Exp-"+u, 1), false},
			{"Semaphore, then slot name", ormlock.Semaphore("Ünï-"+u, 1), ormlock.Name("ormlock.semaphore:Ünï-" + u + "#1"), false},
			{"Semaphore, then All of a slot", ormlock.Semaphore("Exp3-"+u, 1), ormlock.All("ormlock.semaphore:Exp3-"+u+"#1", "x-"+u), false},
			// names a case-insensitive server (MySQL) takes for one lock are
			// one in the process on every server (docs/PROTOCOL.md, Which
			// keys meet on MySQL/MariaDB, and why they stay so)
			{"name, then All of it in upper case", ormlock.Name("job4-" + u), ormlock.All("JOB4-"+u, "other4-"+u), true},
			{"All, then its name in lower case", ormlock.All("ÉTÉ-"+u, "other5-"+u), ormlock.Name("été-" + u), true},
		}
		for _, c := range cases {
			if c.caseOnly && k.Dialect() == "postgres" {
				continue // PostgreSQL keys hash the name's bytes: two keys
			}
			t.Run(c.name, func(t *testing.T) {
				oneHolder(t, r, c.first, c.second, opts)
				oneHolder(t, r, c.second, c.first, opts)
			})
		}
	})
}

// oneHolder holds first in a Session and, meanwhile, tries second on the
// same shared connection: it must be refused, and fn never has two
// callers inside at once.
func oneHolder(t *testing.T, r runner, first, second ormlock.Key, opts []ormlock.Option) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var in testdb.Holders
	held, done := make(chan struct{}), make(chan struct{})
	firstErr := make(chan error, 1)
	go func() {
		firstErr <- r.Session(ctx, first, func(context.Context) error {
			defer in.Enter()()
			close(held)
			<-done
			return nil
		}, opts...)
	}()
	select {
	case <-held:
	case err := <-firstErr:
		t.Fatalf("Session(%s): %v", first, err)
	}
	err := r.Session(ctx, second, func(context.Context) error {
		defer in.Enter()()
		return nil
	}, opts...)
	close(done)
	if ferr := <-firstErr; ferr != nil {
		t.Fatalf("Session(%s): %v", first, ferr)
	}
	if in.Max() > 1 {
		t.Fatalf("Session(%s) and Session(%s) held one server lock at once", first, second)
	}
	if !errors.Is(err, ormlock.ErrNotAcquired) {
		t.Fatalf("Session(%s) while Session(%s) holds: %v, want ErrNotAcquired", second, first, err)
	}
}

// The reservation identity of a MySQL/MariaDB lock name is never less
// strict than the server's comparison: any two names the server under
// test takes for one lock (GET_LOCK from one connection refused while the
// other holds) have one identity. Names the server keeps apart may share
// one (the fold is coarser than MariaDB's byte comparison, so that it is
// as coarse as MySQL's lower-casing): that only refuses a second caller in
// the process.
func TestMySQLLockNameIdentity(t *testing.T) {
	db := testdb.Open(t, testdb.MariaDB)
	ctx := context.Background()
	var conns [2]*sql.Conn
	for i := range conns {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	c1, c2 := conns[0], conns[1]
	var version string
	if err := c1.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	pairs := [][2]string{
		{"job", "job"}, {"job", "JOB"}, {"Job", "job"}, {"café", "cafe"}, {"café", "CAFÉ"},
		{"straße", "strasse"}, {"straße", "STRASSE"}, {"ß", "ẞ"}, {"ſ", "s"}, {"\u212a", "k"},
		{"ǅ", "ǆ"}, {"İ", "i"}, {"Σ", "ς"}, {"Ａ", "ａ"}, {"a\u0301", "á"}, {"job", "job "},
		{"𐐀", "𐐨"},
	}
	var one []string
	for _, p := range pairs {
		var got1, got2 sql.NullInt64
		if err := c1.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", p[0]).Scan(&got1); err != nil || got1.Int64 != 1 {
			t.Fatalf("GET_LOCK(%q): %v %v", p[0], got1, err)
		}
		if err := c2.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", p[1]).Scan(&got2); err != nil {
			t.Fatalf("GET_LOCK(%q): %v", p[1], err)
		}
		for _, c := range []*sql.Conn{c1, c2} {
			if _, err := c.ExecContext(ctx, "DO RELEASE_ALL_LOCKS()"); err != nil {
				t.Fatal(err)
			}
		}
		same := got2.Int64 == 0
		if same {
			one = append(one, fmt.Sprintf("%q=%q", p[0], p[1]))
		}
		a, b := lockproto.MySQLLockIdentity(p[0]), lockproto.MySQLLockIdentity(p[1])
		if same && a != b {
			t.Errorf("%s takes %q and %q for one lock, but their identities %q and %q differ", version, p[0], p[1], a, b)
		}
		for _, n := range p {
			if id := lockproto.MySQLLockIdentity(n); lockproto.MySQLLockIdentity(strings.ToLower(n)) != id {
				t.Errorf("%q: identity %q differs from its lower case's (a server that lower-cases names)", n, id)
			}
		}
	}
	t.Logf("%s: one lock for %v; every other pair two", version, one)
}
