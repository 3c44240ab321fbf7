package testdb

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"

	"github.com/ormlock/ormlock/keyhash"
)

// RawHold takes the lock for name in namespace ns ("" for none) with
// hand-written SQL on a dedicated connection, as existing code would, and
// returns its release (idempotent, also run at cleanup). It fails the test
// if the lock is not acquired. On PostgreSQL it takes a session-level lock
// (pg_try_advisory_lock) through AdminDB, straight on the server, since
// session locks do not survive PgBouncer's transaction mode; on MariaDB it
// takes GET_LOCK on a connection of a new pool (Open).
func RawHold(tb testing.TB, k Kind, ns, name string) (release func()) {
	tb.Helper()
	ctx := context.Background()
	pg := k.Dialect() == "postgres"
	var pool *sql.DB
	if pg {
		pool = AdminDB(tb, k)
	} else {
		pool = Open(tb, k)
	}
	conn, err := pool.Conn(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	var ok bool
	if pg {
		err = conn.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", keyhash.Int64NS(ns, name)).Scan(&ok)
	} else {
		err = conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0) = 1", keyhash.MySQLName(ns, name)).Scan(&ok)
	}
	if err != nil || !ok {
		conn.Close()
		tb.Fatalf("raw lock on %q: ok=%v err=%v", name, ok, err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			var err error
			if pg {
				_, err = conn.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", keyhash.Int64NS(ns, name))
			} else {
				err = RawRelease(ctx, conn, keyhash.MySQLName(ns, name))
			}
			if err != nil {
				tb.Errorf("raw unlock of %q: %v", name, err)
			}
			conn.Close()
		})
	}
	tb.Cleanup(release)
	return release
}

// RawFree reports whether hand-written SQL on AdminDB can take the lock for
// name in namespace ns ("" for none) right now, and releases it at once
// (see RawFreeOn). It fails the test on an error.
func RawFree(tb testing.TB, k Kind, ns, name string) bool {
	tb.Helper()
	ok, err := RawFreeOn(context.Background(), k.Dialect(), AdminDB(tb, k), ns, name)
	if err != nil {
		tb.Fatalf("RawFree(%q): %v", name, err)
	}
	return ok
}

// RawFreeOn is RawFree through the pool db of a server with the given
// dialect ("postgres" or "mysql"), without testing.TB, so safe on any
// goroutine. On PostgreSQL it tries pg_try_advisory_xact_lock in a
// transaction that is rolled back; on MariaDB it runs GET_LOCK and, when
// that succeeds, RELEASE_LOCK on one connection.
func RawFreeOn(ctx context.Context, dialect string, db *sql.DB, ns, name string) (ok bool, err error) {
	if dialect == "postgres" {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return false, err
		}
		defer tx.Rollback()
		if err := tx.QueryRowContext(ctx, "SELECT pg_try_advisory_xact_lock($1)", keyhash.Int64NS(ns, name)).Scan(&ok); err != nil {
			return false, fmt.Errorf("try %q: %w", name, err)
		}
		return ok, nil
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	mysqlName := keyhash.MySQLName(ns, name)
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0) = 1", mysqlName).Scan(&ok); err != nil {
		return false, fmt.Errorf("try %q: %w", name, err)
	}
	if ok {
		if err := RawRelease(ctx, conn, mysqlName); err != nil {
			return false, fmt.Errorf("release %q: %w", name, err)
		}
	}
	return ok, nil
}

// RawRelease runs RELEASE_LOCK(name) on conn, a connection that holds the
// MySQL/MariaDB named lock name, and returns an error unless it answers 1.
// It is a SELECT, not DO, so that it runs on any MySQL-protocol server
// (go-mysql-server and Dolt have no DO).
func RawRelease(ctx context.Context, conn interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, name string) error {
	var released sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", name).Scan(&released); err != nil {
		return err
	}
	if !released.Valid || released.Int64 != 1 {
		return fmt.Errorf("testdb: RELEASE_LOCK(%q) = %v, want 1 (the lock was not held by this connection)", name, released)
	}
	return nil
}
