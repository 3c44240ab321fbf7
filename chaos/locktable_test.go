package chaos_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// TestSharedLockTableExhausted shows the hazard docs/RELIABILITY.md's
// Security section documents: advisory keys are per database, but
// PostgreSQL's lock table is per server. A plain LOGIN role connected to
// another database fills it with session-level advisory locks; then
// ormlock's calls in the application's database fail, and ormlock reports
// the server's error (SQLSTATE 53200, out of shared memory), not
// ErrNotAcquired. Once the role lets go, ormlock works again. A private
// server, so that no other test sees the full table.
func TestSharedLockTableExhausted(t *testing.T) {
	srv := testdb.Start(t, testdb.Postgres)
	admin, err := sql.Open("pgx", srv.AdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	for _, q := range []string{"CREATE DATABASE chaos_other", "CREATE ROLE chaos_filler LOGIN", "GRANT CONNECT ON DATABASE chaos_other TO chaos_filler"} {
		if _, err := admin.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	dsn := srv.DSN()
	if !strings.HasPrefix(dsn, "postgres://postgres@") || !strings.Contains(dsn, "/ormlock?") {
		t.Skipf("DSN %q: cannot derive the filler's DSN", dsn)
	}
	filler, err := sql.Open("pgx", strings.Replace(strings.Replace(dsn, "postgres://postgres@", "postgres://chaos_filler@", 1), "/ormlock?", "/chaos_other?", 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { filler.Close() })
	ctx := context.Background()
	// the application's pool has a connection open before the table fills
	db, sqlDB := openDSN(t, testdb.Postgres, dsn)
	if err := sqlDB.Ping(); err != nil {
		t.Fatal(err)
	}
	conn, err := filler.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	var fillErr error
	for from := 1; from < 1_000_000 && fillErr == nil; from += 1000 {
		var n int
		fillErr = conn.QueryRowContext(ctx, "SELECT count(pg_advisory_lock(g)) FROM generate_series($1::int8, $1::int8 + 999) g", from).Scan(&n)
		held += n
	}
	if err := conn.QueryRowContext(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()").Scan(&held); err != nil {
		t.Logf("count the filler's locks: %v", err)
	}
	t.Logf("figure: a plain role in another database held %d advisory locks before: %v", held, fillErr)

	err = gormlock.Transaction(db, "chaos-locktable", func(*gorm.DB) error { t.Error("fn ran"); return nil })
	var pe *pgconn.PgError
	if errors.Is(err, ormlock.ErrNotAcquired) || !errors.As(err, &pe) || pe.Code != "53200" {
		t.Errorf("Transaction with the lock table full: %v; want the server's SQLSTATE 53200, not ErrNotAcquired", err)
	}
	t.Logf("figure: Transaction on an open connection with the shared lock table full: %v", err)
	sqlDB.SetMaxIdleConns(0) // the next call needs a new connection
	err = gormlock.Transaction(db, "chaos-locktable", func(*gorm.DB) error { t.Error("fn ran"); return nil })
	if errors.Is(err, ormlock.ErrNotAcquired) || !errors.As(err, &pe) || pe.Code != "53200" {
		t.Errorf("Transaction on a new connection: %v; want SQLSTATE 53200", err)
	}
	t.Logf("figure: Transaction on a new connection: %v", err)
	sqlDB.SetMaxIdleConns(2)

	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_unlock_all()"); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if err := gormlock.Transaction(db, "chaos-locktable", func(*gorm.DB) error { return nil }); err != nil {
		t.Errorf("Transaction after the filler let go: %v", err)
	}
	srv.AssertNoLeaks(t, sqlDB)
}
