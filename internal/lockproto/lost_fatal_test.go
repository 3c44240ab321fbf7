package lockproto_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

// A FATAL error ends the session whatever its SQLSTATE, and the lock with
// it: PostgreSQL's idle_in_transaction_session_timeout ends an idle lock
// transaction with FATAL 25P03 (pgpool-II reports a killed backend as FATAL
// XX000), so the COMMIT or ROLLBACK that meets it reports ErrLockLost, for
// each protocol whose lock is on fn's connection.
func TestFatalEndsTheLock(t *testing.T) {
	ctx := context.Background()
	k := testdb.Postgres
	db := testdb.Open(t, k)
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
	for _, c := range protocolCases(k) {
		if strings.HasPrefix(c.name, "split") {
			continue // the lock is on a connection of its own, not fn's
		}
		for _, end := range []struct {
			name string
			f    func(*lockproto.LockedTx) error
		}{{"Commit", (*lockproto.LockedTx).Commit}, {"Rollback", (*lockproto.LockedTx).Rollback}} {
			t.Run(c.name+"/"+end.name, func(t *testing.T) {
				op := newOp(t, k, keys.Name(t.Name()))
				op.NeedSQLTx = c.needSQLTx
				lt, err := op.BeginLocked(ctx, db, c.opts)
				if err != nil {
					t.Fatal(err)
				}
				var pid int64
				if err := lt.Tx.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
					t.Fatal(err)
				}
				if _, err := lt.Tx.ExecContext(ctx, "SET idle_in_transaction_session_timeout = '50ms'"); err != nil {
					t.Fatal(err)
				}
				testdb.WaitGone(t, k, pid)
				if err := end.f(lt); !errors.Is(err, ormlock.ErrLockLost) {
					t.Fatalf("%s after the server ended the idle transaction: %v, want ErrLockLost", end.name, err)
				}
			})
		}
	}
}
