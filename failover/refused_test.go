package failover_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/pgxlock"
	"github.com/ormlock/ormlock/sqllock"
)

// TestPGliteRefused runs the real pglite-socket (npm
// @electric-sql/pglite-socket on the machine's Node), which serves one
// PGlite session to every client: two connections announce one backend
// pid and share the session (an advisory lock taken on one is granted to
// the other too), and every verb of sqllock, gormlock, entlock and pgxlock
// is refused before anything runs, by the multiplexer probe (two
// connections, one pid) when clients are served at once, and by PGlite's
// version() when they are served one at a time.
func TestPGliteRefused(t *testing.T) {
	topology(t)
	for _, c := range []struct {
		name     string
		maxConns int
		why      string
	}{
		{"multiplexed", 10, "two connections announced one backend"},
		{"one client at a time", 1, "PGlite"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dsn := testdb.StartPGlite(t, c.maxConns)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if c.maxConns > 1 {
				a, err := pgx.Connect(ctx, dsn+"&default_query_exec_mode=simple_protocol")
				if err != nil {
					t.Fatal(err)
				}
				defer a.Close(ctx)
				b, err := pgx.Connect(ctx, dsn+"&default_query_exec_mode=simple_protocol")
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close(ctx)
				var gotA, gotB bool
				if err := a.QueryRow(ctx, "SELECT pg_try_advisory_lock(4242)").Scan(&gotA); err != nil {
					t.Fatal(err)
				}
				if err := b.QueryRow(ctx, "SELECT pg_try_advisory_lock(4242)").Scan(&gotB); err != nil {
					t.Fatal(err)
				}
				t.Logf("figure: pglite-socket: two connections announced pids %d and %d; pg_try_advisory_lock(4242) granted to both: %v, %v",
					a.PgConn().PID(), b.PgConn().PID(), gotA, gotB)
			}
			// One pgx pool for every adapter, database/sql's over it: a
			// one-client server then sees one client from first to last
			// (the multiplexer probe's aside, which it turns away). Simple
			// protocol: two clients of a multiplexer would prepare pgx's
			// cached statements in one shared session.
			pool, err := pgxpool.New(ctx, fmt.Sprintf("%s&default_query_exec_mode=simple_protocol&pool_max_conns=%d", dsn, c.maxConns))
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			db := stdlib.OpenDBFromPool(pool)
			defer db.Close()
			start := time.Now()
			assertAllRefused(t, "pglite", c.why, "postgres", db)
			ran := 0
			err = pgxlock.Transaction(ctx, pool, "refused", func(context.Context, pgx.Tx) error { ran++; return nil })
			if !errors.Is(err, ormlock.ErrUnsupportedDialect) || !strings.Contains(err.Error(), c.why) || ran != 0 {
				t.Errorf("pgxlock.Transaction: %v (fn ran %d times), want ErrUnsupportedDialect naming %q", err, ran, c.why)
			}
			t.Logf("figure: pglite-socket --max-connections=%d: every verb refused in %v", c.maxConns, time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestGalera starts a two-node Galera cluster: a raw GET_LOCK of one name
// succeeds on both nodes at once (the lock is local to a node, and every
// node accepts writes), which is why every verb of every adapter is refused
// on each node with ErrUnsupportedDialect before anything runs.
func TestGalera(t *testing.T) {
	topology(t)
	g := testdb.StartGalera(t, 2)
	t.Logf("figure: Galera cluster of 2 nodes on MariaDB %s", g.Version(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, node := range g.Nodes {
		db := openPool(t, "mysql", node.DSN())
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close() // each session keeps its lock to the end
		var got sql.NullInt64
		if err := c.QueryRowContext(ctx, "SELECT GET_LOCK('ormlock-galera', 0)").Scan(&got); err != nil {
			t.Fatalf("node %d: GET_LOCK: %v", i+1, err)
		}
		t.Logf("figure: node %d: GET_LOCK('ormlock-galera', 0) = %v (sessions on %d nodes hold it)", i+1, got, i+1)
		if !got.Valid || got.Int64 != 1 {
			t.Errorf("node %d: GET_LOCK = %v, want 1 (on node 2: granted although node 1's session holds it): the reason for the refusal did not show", i+1, got)
		}
	}
	for i, node := range g.Nodes {
		assertAllRefused(t, fmt.Sprintf("node %d", i+1), "Galera", "mysql", openPool(t, "mysql", node.DSN()))
	}
	// a rate limit too: SKIP LOCKED is local to a node, and a conflicting
	// take of the last token would be found only at COMMIT, after fn ran
	ran := 0
	err := sqllock.Transaction(ctx, openPool(t, "mysql", g.Nodes[0].DSN()), ormlock.Rate("ormlock-galera-rate", 1, time.Minute), func(context.Context, *sql.Tx) error {
		ran++
		return nil
	})
	if !errors.Is(err, ormlock.ErrUnsupportedDialect) || !strings.Contains(err.Error(), "Galera") || ran != 0 {
		t.Errorf("Transaction of a Rate on a Galera node: %v (fn ran %d times), want ErrUnsupportedDialect naming Galera", err, ran)
	}
}
