package lockproto_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

// A statement of the prepared lock's name that the library did not
// prepare (an application's own, prepared before the library's, or after
// it dropped the library's) never stands in for the lock: a call on a key
// held elsewhere is not acquired, whatever the foreign statement answers;
// and one with other parameter types does not make the connection fail
// for ever: the call that meets it, and every later one, lock as usual.
func TestPreparedTryLockForeignStatement(t *testing.T) {
	k := testdb.Postgres
	const int8Stmt = "ormlock_pg_try_advisory_xact_lock_int8"
	foreign := map[string]string{
		"same parameter types":  "PREPARE " + int8Stmt + "(int8) AS SELECT true, 'read committed'::text",
		"other parameter types": "PREPARE " + int8Stmt + "(text, text) AS SELECT $1 = $2",
	}
	for name, prepare := range foreign {
		for _, after := range []bool{false, true} {
			what := name
			if after {
				what += ", after the library's was dropped"
			}
			t.Run(what, func(t *testing.T) {
				ctx := context.Background()
				db := testdb.Open(t, k)
				db.SetMaxOpenConns(1) // one connection: every call reuses it
				other := testdb.Open(t, k)
				t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db, other) })
				key := ormlock.Name(t.Name())
				lockOnce(t, db, other, key, nil) // learns the connection is direct
				if after {
					lockOnce(t, db, other, key, nil) // prepares the library's
					if _, err := db.Exec("DEALLOCATE " + int8Stmt); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := db.Exec(prepare); err != nil {
					t.Fatal(err)
				}
				release := testdb.RawHold(t, k, "", t.Name())
				for i := range 2 {
					op, _ := lockproto.NewOp(lockproto.Postgres, "Transaction", key, config.Config{})
					lt, err := op.BeginLocked(ctx, db, nil)
					if err == nil {
						_ = lt.Rollback()
						t.Fatalf("call %d: acquired a lock held elsewhere (the foreign statement ran as the lock)", i+1)
					}
					if !errors.Is(err, ormlock.ErrNotAcquired) {
						t.Errorf("call %d on a key held elsewhere: %v, want ErrNotAcquired", i+1, err)
					}
				}
				release()
				for range 2 {
					lockOnce(t, db, other, key, nil)
				}
			})
		}
	}
}
