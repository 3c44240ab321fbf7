package gormlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// TestStandbyRefused: every verb on a pool whose server is a PostgreSQL hot
// standby (a dbresolver replica, a misrouted DSN) is refused before fn runs,
// with ErrUnsupportedDialect naming the reason; the primary still works.
func TestStandbyRefused(t *testing.T) {
	primary := testdb.Start(t, testdb.Postgres)
	standby := primary.StartStandby(t)

	db, _, _ := openPrivate(t, standby, "")
	want := func(t *testing.T, what string, err error) {
		t.Helper()
		if !errors.Is(err, ormlock.ErrUnsupportedDialect) || !strings.Contains(err.Error(), "hot standby") {
			t.Errorf("%s on a standby: %v; want ErrUnsupportedDialect naming the hot standby", what, err)
		}
	}
	called := false
	want(t, "Transaction", gormlock.Transaction(db, "standby-tx", func(*gorm.DB) error { called = true; return nil }))
	want(t, "Session", gormlock.Session(db, "standby-session", func(context.Context) error { called = true; return nil }))
	want(t, "RunOnce", gormlock.RunOnce(db, "standby-job", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), func(*gorm.DB) error { called = true; return nil }))
	_, err := gormlock.Holder(db, "standby-tx")
	want(t, "Holder", err)
	// A refusal is not cached: the second call asks again and is refused again.
	want(t, "Transaction again", gormlock.Transaction(db, "standby-tx", func(*gorm.DB) error { called = true; return nil }))
	if called {
		t.Error("fn ran on a standby")
	}

	pdb, _, _ := openPrivate(t, primary, "")
	if err := gormlock.Transaction(pdb, "standby-tx", func(*gorm.DB) error { return nil }); err != nil {
		t.Errorf("Transaction on the primary: %v", err)
	}
}

// TestCheckServerNestedOnePool: the first call on a pool, nested in a
// transaction of a pool with a single connection, asks its question through
// that transaction rather than waiting for a second connection.
func TestCheckServerNestedOnePool(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			db, sqlDB := openGorm(t, k) // a new pool: nothing cached yet
			sqlDB.SetMaxOpenConns(1)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			ran := false
			err := db.WithContext(ctx).Transaction(func(outer *gorm.DB) error {
				return gormlock.Transaction(outer, "nested-onepool-"+string(k), func(*gorm.DB) error { ran = true; return nil })
			})
			if err != nil || !ran {
				t.Fatalf("nested Transaction on a one-connection pool: err=%v ran=%v", err, ran)
			}
		})
	}
}
