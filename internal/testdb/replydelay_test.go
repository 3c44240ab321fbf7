package testdb_test

import (
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock/internal/testdb"
)

// DelayReplies holds the answers to the statements it matches, prepared
// (parameters) or not, on every kind, and nothing else: the statements it
// matched are those, counted once each; a statement that matches no more
// once it is stopped.
func TestDelayReplies(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		t.Parallel()
		px, dsn := testdb.ProxyDSN(t, k)
		db, err := sql.Open(k.Driver(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		const d = 300 * time.Millisecond
		px.DelayReplies(func(q string) bool { return strings.Contains(q, "'slow'") }, d)
		arg := "$1::int8"
		if k.Dialect() == "mysql" {
			arg = "?"
		}
		for _, c := range []struct {
			query string
			args  []any
			slow  bool
		}{
			{"SELECT 'fast'", nil, false},
			{"SELECT 'slow'", nil, true},
			{"SELECT 'slow', " + arg, []any{1}, true}, // prepared where the driver prepares
			{"SELECT 'fast', " + arg, []any{2}, false},
			{"SELECT 'slow', " + arg, []any{3}, true}, // the same statement again
		} {
			before := len(px.Matched())
			start := time.Now()
			rows, err := db.QueryContext(ctx(t), c.query, c.args...)
			if err != nil {
				t.Fatalf("%s: %v", c.query, err)
			}
			for rows.Next() {
			}
			if err := rows.Close(); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			matched := len(px.Matched()) - before
			if c.slow && (matched != 1 || took < d) {
				t.Errorf("%s: matched %d times, answered in %v; want once, held %v", c.query, matched, took, d)
			}
			if !c.slow && matched != 0 {
				t.Errorf("%s: matched %d times, want none", c.query, matched)
			}
		}
		px.DelayReplies(nil, 0)
		before := len(px.Matched())
		if _, err := db.ExecContext(ctx(t), "SELECT 'slow'"); err != nil {
			t.Fatal(err)
		}
		if n := len(px.Matched()) - before; n != 0 {
			t.Errorf("stopped, yet %d statements matched", n)
		}
	})
}
