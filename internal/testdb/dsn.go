package testdb

import (
	"strings"
	"testing"
)

// WithDatabase returns dsn (a pgx URL or a go-sql-driver/mysql DSN on
// database "ormlock", as the servers testdb starts give) pointed at
// database name. A DSN of another shape (from an environment variable)
// cannot be pointed elsewhere: the test is skipped.
func WithDatabase(tb testing.TB, dsn, name string) string {
	tb.Helper()
	const from = "/ormlock?"
	if !strings.Contains(dsn, from) {
		tb.Skipf("DSN %q does not name database ormlock: cannot point it at database %s", dsn, name)
	}
	return strings.Replace(dsn, from, "/"+name+"?", 1)
}
