package lockproto_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

// Destroy closes the connection for real even when the *sql.DB is pgx's
// driver over a pgx pool (stdlib.OpenDBFromPool), whose connections' Close
// hands them back to the pool when they look idle: a destroyed lock
// connection must not be handed back with its locks. On PostgreSQL (behind
// PgBouncer ormlock takes no session lock on a connection it shares).
func TestDestroyPoolConn(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres} {
		t.Run(string(k), func(t *testing.T) {
			cfg, err := pgxpool.ParseConfig(testdb.DSN(t, k))
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxConns = 1
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			db := stdlib.OpenDBFromPool(pool)
			defer db.Close()
			ctx := t.Context()
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var pid int
			if err := conn.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				t.Fatal(err)
			}
			name := "destroy-pool-conn-" + t.Name()
			if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock(hashtext($1))", name); err != nil {
				t.Fatal(err)
			}
			lockproto.Destroy(conn)
			var again int
			if err := db.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&again); err != nil {
				t.Fatal(err)
			}
			if again == pid {
				t.Errorf("the pool handed back the destroyed connection (backend %d)", pid)
			}
			if st := pool.Stat(); st.TotalConns() != 1 || st.AcquiredConns() != 0 {
				t.Errorf("pool after Destroy: %d connections, %d acquired; want 1, 0", st.TotalConns(), st.AcquiredConns())
			}
			var held bool
			if err := testdb.AdminDB(t, testdb.Postgres).QueryRowContext(ctx,
				"SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objid = (hashtext($1)::int8 & 4294967295) AND pid = $2)", name, pid).Scan(&held); err != nil {
				t.Fatal(err)
			}
			if held {
				t.Errorf("backend %d still holds the lock after Destroy", pid)
			}
		})
	}
}
