package pgxlock_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/pgxlock"
)

// Behind PgBouncer 1.18 in transaction mode, pgx's default exec mode
// (cache_statement) prepares statements that another client's pool then
// finds on the same server connection (42P05) or misses (26000); the
// library's error names that cause and the DSN setting that fixes it.
func TestPgBouncerStatementCacheError(t *testing.T) {
	ctx := context.Background()
	var msg string
	for i := 0; i < 8 && msg == ""; i++ {
		// A pool of its own each time: a new client whose statement
		// cache is empty, on PgBouncer's same few server connections.
		pool := newPool(t, testdb.PgBouncer, "cache_statement", 1)
		for j := 0; j < 3 && msg == ""; j++ {
			err := pgxlock.Transaction(ctx, pool, "pgxlock-stmtcache", func(ctx context.Context, tx pgx.Tx) error {
				var n int
				return tx.QueryRow(ctx, "SELECT $1::int", 1).Scan(&n)
			})
			if err != nil {
				msg = err.Error()
			}
		}
		pool.Close()
	}
	if msg == "" {
		t.Fatal("no prepared statement clash behind PgBouncer in 8 pools with cache_statement")
	}
	if !strings.Contains(msg, "42P05") && !strings.Contains(msg, "26000") {
		t.Fatalf("the call failed otherwise: %s", msg)
	}
	for _, s := range []string{"PgBouncer before 1.21", "default_query_exec_mode=simple_protocol", "(or exec)"} {
		if !strings.Contains(msg, s) {
			t.Errorf("the error does not say %q: %s", s, msg)
		}
	}
}
