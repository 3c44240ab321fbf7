package gormlock_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock/internal/gormtest"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
)

// pgLockBackendQuery finds the backend holding a bigint advisory lock (pg_locks
// keeps its high half in classid and its low half in objid).
const pgLockBackendQuery = `
SELECT a.pid, a.backend_xmin IS NULL, coalesce(a.state, '')
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
  AND l.classid::int8 = $1 AND l.objid::int8 = $2`

// lockBackend describes the server connection that holds a lock.
type lockBackend struct {
	id       int64  // PostgreSQL pid, or MariaDB connection id
	xminNull bool   // PostgreSQL: backend_xmin IS NULL
	state    string // PostgreSQL: pg_stat_activity.state
}

// findLockConn looks up, through admin (a superuser pool straight to the
// server), the connection that holds the lock for name (no namespace). ok is
// false when nobody holds it.
func findLockConn(ctx context.Context, dialect string, admin *sql.DB, name string) (b lockBackend, ok bool, err error) {
	if dialect == "postgres" {
		k := uint64(keyhash.Int64(name))
		err = admin.QueryRowContext(ctx, pgLockBackendQuery, int64(k>>32), int64(k&0xffffffff)).Scan(&b.id, &b.xminNull, &b.state)
	} else {
		var id sql.NullInt64
		err = admin.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", keyhash.MySQLName("", name)).Scan(&id)
		if err == nil && !id.Valid {
			err = sql.ErrNoRows
		}
		b.id = id.Int64
	}
	if errors.Is(err, sql.ErrNoRows) {
		return b, false, nil
	}
	return b, err == nil, err
}

// lockConn returns the connection holding the lock for name, waiting up to
// 10s for one to appear.
func lockConn(t *testing.T, dialect string, admin *sql.DB, name string) lockBackend {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, ok, err := findLockConn(context.Background(), dialect, admin, name)
		if err != nil {
			t.Fatalf("find the lock connection of %q: %v", name, err)
		}
		if ok {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("nobody holds %q", name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lockFree reports whether hand-written SQL through admin can take the lock
// for name right now (releasing it at once): rawFree for any server, safe
// on any goroutine.
func lockFree(ctx context.Context, dialect string, admin *sql.DB, name string) (ok bool, err error) {
	return testdb.RawFreeOn(ctx, dialect, admin, "", name)
}

// openDSN opens a pool on dsn for a server of kind k, wrapped in GORM; the
// pool is closed in Cleanup.
func openDSN(t *testing.T, k testdb.Kind, dsn string) (*gorm.DB, *sql.DB) {
	t.Helper()
	sqlDB, err := sql.Open(k.Driver(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqlDB.Close() })
	return gormtest.On(t, k.Dialect(), sqlDB), sqlDB
}

// openPrivate opens a pool on the private server s (or on dsn, when given,
// a DSN of s) and asserts after the test that nothing leaked on s. It also
// returns a superuser pool straight to the server that runs the SQL.
func openPrivate(t *testing.T, s *testdb.Server, dsn string) (db *gorm.DB, sqlDB, admin *sql.DB) {
	t.Helper()
	k := s.Kind()
	if dsn == "" {
		dsn = s.DSN()
	}
	db, sqlDB = openDSN(t, k, dsn)
	admin, err := sql.Open(k.Driver(), s.AdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	t.Cleanup(func() { s.AssertNoLeaks(t, sqlDB) })
	return db, sqlDB, admin
}

// withParam adds a query parameter (key=value, already escaped) to a pgx URL
// or a go-sql-driver/mysql DSN. A keyword/value PostgreSQL DSN (from an
// environment variable) cannot take one: the test is skipped.
func withParam(t *testing.T, dsn, kv string) string {
	t.Helper()
	if !strings.Contains(dsn, "/") {
		t.Skipf("DSN %q is not a URL: cannot add %s", dsn, kv)
	}
	if strings.Contains(dsn, "?") {
		return dsn + "&" + kv
	}
	return dsn + "?" + kv
}
