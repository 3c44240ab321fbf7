package lockproto_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

// A rolling deploy: the released versions lock with a bound parameter
// (SELECT GET_LOCK(?, 0), a prepared statement), this one with the name as
// a literal in text (lockproto.MySQLGetLock: CAST(X'…' AS CHAR)). Each
// excludes the other, both ways, for ASCII, non-ASCII and 64-byte names
// and names with quotes and backslashes, whatever the character set
// (utf8mb4, latin1, binary) and sql_mode (the server's, and
// ANSI,NO_BACKSLASH_ESCAPES) of each side's connection; and the server
// names the holder's connection for either form (IS_USED_LOCK).
func TestMySQLNameLiteralIdentity(t *testing.T) {
	k := testdb.MariaDB
	ctx := context.Background()
	db := testdb.Open(t, k)
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
	names := []string{
		"rolling-ascii",
		"rolling-café",
		"rolling-straße",
		"rolling-🔒-emoji",
		"rolling-锁-ロック",
		`rolling-'quote"-\back\slash\'`,
		"rolling-64-" + strings.Repeat("é", 26) + "x", // 11 + 52 + 1 bytes
	}
	if n := len(names[len(names)-1]); n != 64 {
		t.Fatalf("the long name has %d bytes, want 64", n)
	}
	type session struct{ charset, mode string }
	var sessions []session
	for _, cs := range []string{"utf8mb4", "latin1", "binary"} {
		for _, mode := range []string{"", "ANSI,NO_BACKSLASH_ESCAPES"} {
			sessions = append(sessions, session{cs, mode})
		}
	}
	open := func(s session) (*sql.Conn, int64) {
		t.Helper()
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lockproto.Destroy(c) }) // its session settings go with it
		stmts := []string{"SET NAMES " + s.charset}
		if s.mode != "" {
			stmts = append(stmts, "SET SESSION sql_mode = '"+s.mode+"'")
		}
		for _, q := range stmts {
			if _, err := c.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		var id int64
		if err := c.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
			t.Fatal(err)
		}
		return c, id
	}
	bound := func(c *sql.Conn, name string) bool {
		t.Helper()
		var got sql.NullInt64
		if err := c.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", name).Scan(&got); err != nil || !got.Valid {
			t.Fatalf("bound GET_LOCK(%q): %v, %v", name, got, err)
		}
		return got.Int64 == 1
	}
	boundUsedBy := func(c *sql.Conn, name string) int64 {
		t.Helper()
		var id sql.NullInt64
		if err := c.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", name).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id.Int64
	}
	boundRelease := func(c *sql.Conn, name string) {
		t.Helper()
		var got sql.NullInt64
		if err := c.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", name).Scan(&got); err != nil || got.Int64 != 1 {
			t.Fatalf("bound RELEASE_LOCK(%q): %v, %v", name, got, err)
		}
	}
	for _, olds := range sessions {
		for _, news := range sessions {
			old, oldID := open(olds)
			cur, curID := open(news)
			for _, name := range names {
				where := fmt.Sprintf("%q, released version's connection %+v, this version's %+v", name, olds, news)
				// the released version holds: this one is refused, and sees it
				if !bound(old, name) {
					t.Fatalf("%s: the bound GET_LOCK was refused on a free name", where)
				}
				if ok, err := lockproto.MySQLGetLock(ctx, cur, name, 0); err != nil || ok {
					t.Errorf("%s: the literal GET_LOCK took a name the bound one holds: %v, %v", where, ok, err)
				}
				if err := lockproto.MySQLHeld(ctx, old, name); err != nil {
					t.Errorf("%s: the literal IS_USED_LOCK does not name the bound holder: %v", where, err)
				}
				boundRelease(old, name)
				// this version holds: the released one is refused, and sees it
				if ok, err := lockproto.MySQLGetLock(ctx, cur, name, 0); err != nil || !ok {
					t.Fatalf("%s: the literal GET_LOCK on a free name: %v, %v", where, ok, err)
				}
				if bound(old, name) {
					t.Errorf("%s: the bound GET_LOCK took a name the literal one holds", where)
				}
				if id := boundUsedBy(old, name); id != curID {
					t.Errorf("%s: the bound IS_USED_LOCK names connection %d, want %d (the literal's holder; the bound side is %d)", where, id, curID, oldID)
				}
				if err := lockproto.MySQLReleaseLock(ctx, cur, name); err != nil {
					t.Fatalf("%s: the literal RELEASE_LOCK: %v", where, err)
				}
			}
			lockproto.Destroy(old)
			lockproto.Destroy(cur)
		}
	}
}
