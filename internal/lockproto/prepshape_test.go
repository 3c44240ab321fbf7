package lockproto_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

// On a direct connection a semaphore and a set tried once are statements
// prepared once per connection and run by EXECUTE with BEGIN, as the
// single key's try is; behind PgBouncer nothing is prepared. The prepared
// forms exclude as the text ones do (a semaphore of 3 admits 3 holders,
// a set is refused while one of its keys is held elsewhere), and one the
// application dropped is prepared again within the call.
func TestPreparedShapes(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			ctx := context.Background()
			db := testdb.Open(t, k)
			db.SetMaxOpenConns(1) // one connection: every call reuses it
			others := []*sql.DB{testdb.Open(t, k), testdb.Open(t, k), testdb.Open(t, k)}
			t.Cleanup(func() { testdb.AssertNoLeaks(t, k, append(others, db)...) })
			sem := keys.Semaphore(keys.Name(t.Name()+"/sem"), 3)
			all := keys.All(keys.Name(t.Name()+"/a"), keys.Name(t.Name()+"/b"), keys.Name(t.Name()+"/c"))
			begin := func(db *sql.DB, key keys.Key) (*lockproto.LockedTx, error) {
				op, err := lockproto.NewOp(lockproto.Postgres, "Transaction", key, config.Config{})
				if err != nil {
					t.Fatal(err)
				}
				return op.BeginLocked(ctx, db, nil)
			}
			// call locks key on db, checks that the prepared statements
			// inside its transaction are want, and commits
			call := func(key keys.Key, want ...string) {
				t.Helper()
				lt, err := begin(db, key)
				if err != nil {
					t.Fatalf("%v: %v", key, err)
				}
				got := preparedLocks(t, lt)
				if err := lt.Commit(); err != nil {
					t.Fatal(err)
				}
				if k != testdb.Postgres {
					want = nil
				}
				if !slices.Equal(got, want) {
					t.Fatalf("%v: prepared %q, want %q", key, got, want)
				}
			}
			semStmt, allStmt := "", ""
			call(sem) // the first call learns that the connection is direct
			lt, err := begin(db, sem)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range preparedLocks(t, lt) {
				if strings.HasPrefix(n, "ormlock_pg_try_semaphore_") && strings.HasSuffix(n, "_3") {
					semStmt = n
				}
			}
			if k == testdb.Postgres && semStmt == "" {
				t.Fatalf("the semaphore's statement is not prepared: %q", preparedLocks(t, lt))
			}
			// lt holds one slot by the prepared statement: two more
			// holders get in, a fourth does not
			var held []*lockproto.LockedTx
			for i, o := range others[:2] {
				h, err := begin(o, sem)
				if err != nil {
					t.Fatalf("holder %d of 3: %v", i+2, err)
				}
				held = append(held, h)
			}
			if _, err := begin(others[2], sem); !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Fatalf("a fourth holder of a semaphore of 3: %v", err)
			}
			_ = lt.Rollback()
			// the prepared statement of a full semaphore is refused
			lt, err = begin(others[2], sem)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := begin(db, sem); !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Fatalf("the prepared statement on a full semaphore: %v", err)
			}
			for _, h := range append(held, lt) {
				_ = h.Rollback()
			}

			// the connection is known to be direct: the set's first call
			// prepares its statement
			lt, err = begin(db, all)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range preparedLocks(t, lt) {
				if strings.HasPrefix(n, "ormlock_pg_try_all_") {
					allStmt = n
				}
			}
			_ = lt.Rollback()
			if k != testdb.Postgres {
				return
			}
			if allStmt == "" {
				t.Fatal("the set's statement is not prepared")
			}
			both := []string{allStmt, semStmt}
			release := testdb.RawHold(t, k, "", t.Name()+"/c")
			if _, err := begin(db, all); !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Fatalf("the prepared set with a key held elsewhere: %v", err)
			}
			release()
			call(all, both...)
			if s := db.Stats(); s.InUse != 0 || s.OpenConnections != 1 {
				t.Fatalf("the connection is not back in the pool: %+v", s)
			}
			// dropped by the application: prepared again in the call
			for _, n := range both {
				if _, err := db.Exec("DEALLOCATE " + n); err != nil {
					t.Fatal(err)
				}
			}
			call(sem, semStmt)
			call(all, both...)
			// a foreign statement of the name never stands in for the lock
			if _, err := db.Exec("DEALLOCATE " + allStmt); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec("PREPARE " + allStmt + "(int8, int8, int8) AS SELECT true, 'read committed'::text, 1::int8"); err != nil {
				t.Fatal(err)
			}
			release = testdb.RawHold(t, k, "", t.Name()+"/a")
			if _, err := begin(db, all); !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Fatalf("a foreign statement of the set's name: %v", err)
			}
			release()
			call(all, both...)
		})
	}
}
