package testdb

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// WithDatabase returns dsn (a pgx URL or a go-sql-driver/mysql DSN on
// database "ormlock", as the servers testdb starts give) pointed at
// database name. A DSN of another shape (from an environment variable)
// cannot be pointed elsewhere: the test is skipped, or fails when CI is
// set (CI never passes by skipping).
func WithDatabase(tb testing.TB, dsn, name string) string {
	tb.Helper()
	const from = "/ormlock?"
	if !strings.Contains(dsn, from) {
		msg := fmt.Sprintf("DSN %q does not name database ormlock: cannot point it at database %s", dsn, name)
		if os.Getenv("CI") != "" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	return strings.Replace(dsn, from, "/"+name+"?", 1)
}

// WithParams returns dsn (a pgx URL or a go-sql-driver/mysql DSN) with the
// extra parameters params ("autocommit=0", "a=1&b=2") added to its query.
func WithParams(dsn, params string) string {
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + params
}
