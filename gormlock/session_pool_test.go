package gormlock_test

import (
	"context"
	"testing"

	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// A Session raises its MariaDB connection's wait_timeout while it holds the
// lock; the connection goes back to the pool with the server's default.
func TestSessionRestoresWaitTimeout(t *testing.T) {
	k := testdb.MariaDB
	db, sqlDB := openGorm(t, k)
	admin := testdb.AdminDB(t, k)
	var global int
	if err := admin.QueryRow("SELECT @@global.wait_timeout").Scan(&global); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec("SET GLOBAL wait_timeout = 30"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec("SET GLOBAL wait_timeout = ?", global) })
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
