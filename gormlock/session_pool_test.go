package gormlock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/gormtest"
	"github.com/ormlock/ormlock/internal/testdb"
)

// A Session raises its MariaDB connection's wait_timeout while it holds the
// lock; the connection goes back to the pool with the value it had, here
// the server's default.
func TestSessionRestoresWaitTimeout(t *testing.T) {
	k := testdb.MariaDB
	admin := testdb.AdminDB(t, k)
	var global int
	if err := admin.QueryRow("SELECT @@global.wait_timeout").Scan(&global); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec("SET GLOBAL wait_timeout = 30"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec("SET GLOBAL wait_timeout = ?", global) })
	db, sqlDB := gormtest.Open(t, k) // its connections start with the new default
	// one connection: the Session's lock connection is the one the pool
	// hands out next
	sqlDB.SetMaxOpenConns(1)
	if err := gormlock.Session(db, "waittimeout-"+t.Name(), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	var v int
	if err := sqlDB.QueryRow("SELECT @@session.wait_timeout").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != 30 {
		t.Fatalf("pooled connection kept wait_timeout %d, want the server default 30", v)
	}
}

// A Session gives its MariaDB connection back with the connection's own
// wait_timeout, here the one the application set in the DSN (go-sql-driver
// sends an unknown DSN parameter as SET wait_timeout=7), whether the lock
// was taken or another holder had it; a value above the Session's minimum is
// never touched.
func TestSessionRestoresOwnWaitTimeout(t *testing.T) {
	k := testdb.MariaDB
	for _, tc := range []struct {
		name  string
		param string
		held  bool // another holder has the lock
		want  int
	}{
		{"raised and restored", "wait_timeout=7", false, 7},
		{"not acquired", "wait_timeout=7", true, 7},
		{"long enough", "wait_timeout=3600", false, 3600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, sqlDB := openDSN(t, k, withParam(t, testdb.DSN(t, k), tc.param))
			t.Cleanup(func() { testdb.AssertNoLeaks(t, k, sqlDB) })
			// one connection: the Session's lock connection is the one
			// the pool hands out next
			sqlDB.SetMaxOpenConns(1)
			key := "s-own-waittimeout-" + t.Name()
			if tc.held {
				defer rawHold(t, k, key)()
			}
			err := gormlock.Session(db, key, func(context.Context) error { return nil })
			if tc.held != errors.Is(err, ormlock.ErrNotAcquired) || (!tc.held && err != nil) {
				t.Fatalf("Session: %v", err)
			}
			var v int
			if err := sqlDB.QueryRow("SELECT @@session.wait_timeout").Scan(&v); err != nil {
				t.Fatal(err)
			}
			if v != tc.want {
				t.Fatalf("pooled connection has wait_timeout %d, want its own %d", v, tc.want)
			}
		})
	}
}
