// Package leakcheck is the goroutine-leak check of the Session tests, kept
// out of testdb so that the modules whose tests use testdb (scheduler,
// examples, bench) need not require goleak.
package leakcheck

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/ormlock/ormlock/internal/testdb"
)

// Goroutines fails the test if it leaves a goroutine behind. Call it
// first in a test (before opening pools or starting servers), so that its
// check runs after every other cleanup (pools closed, private servers
// stopped). The shared admin pools of the kinds named (all kinds when none
// is named) live for the whole test binary: they are opened before the
// snapshot, and database/sql's connection cleaner and go-sql-driver/mysql's
// per-connection watcher are ignored (a connection the library failed to
// give back shows up in testdb.AssertNoLeaks, InUse != 0, instead), as is the
// waiter goroutine a restarted server process gets. Tests that use it do not
// run in parallel with other top-level tests, whose goroutines would show.
func Goroutines(t *testing.T, kinds ...testdb.Kind) {
	t.Helper()
	if len(kinds) == 0 {
		kinds = testdb.Kinds()
	}
	for _, k := range kinds {
		testdb.AdminDB(t, k)
	}
	opts := []goleak.Option{
		goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/ormlock/ormlock/internal/testdb.startProc.func1"),
		goleak.IgnoreAnyFunction("database/sql.(*DB).connectionCleaner"),
		goleak.IgnoreAnyFunction("github.com/go-sql-driver/mysql.(*mysqlConn).startWatcher.func1"),
		// pgx reads in the background while a cancelled statement's
		// connection is being closed; the reader ends when the socket does,
		// a moment after the pool that owned it was closed.
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgconn/internal/bgreader.(*BGReader).bgRead"),
	}
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}
