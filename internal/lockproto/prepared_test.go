package lockproto_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

// preparedLocks lists the lock statements prepared on the transaction's
// backend.
func preparedLocks(t *testing.T, lt *lockproto.LockedTx) []string {
	t.Helper()
	rows, err := lt.Tx.QueryContext(context.Background(), "SELECT name FROM pg_prepared_statements WHERE name LIKE 'ormlock%' ORDER BY name")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// lockOnce takes key try-once through BeginLocked on db, checks that a
// second pool cannot take it meanwhile, and returns the prepared lock
// statements seen inside the transaction, which it commits.
func lockOnce(t *testing.T, db, other *sql.DB, key keys.Key, obs ormlock.Observer) []string {
	t.Helper()
	ctx := context.Background()
	op, err := lockproto.NewOp(lockproto.Postgres, "Transaction", key, config.New(ormlock.WithObserver(obs)))
	if err != nil {
		t.Fatal(err)
	}
	lt, err := op.BeginLocked(ctx, db, nil)
	if err != nil {
		t.Fatalf("%v: %v", key, err)
	}
	if _, ok := lt.Tx.(*lockproto.OneMessageTx); !ok {
		t.Fatalf("Tx is %T, want the one-message *lockproto.OneMessageTx", lt.Tx)
	}
	op2, _ := lockproto.NewOp(lockproto.Postgres, "Transaction", key, config.Config{})
	if _, err := op2.BeginLocked(ctx, other, nil); !errors.Is(err, ormlock.ErrNotAcquired) {
		t.Fatalf("%v: second holder: %v", key, err)
	}
	names := preparedLocks(t, lt)
	if err := lt.Commit(); err != nil {
		t.Fatal(err)
	}
	return names
}

// On a connection that reaches PostgreSQL directly, the try-once lock is a
// statement prepared once per connection and run by EXECUTE with BEGIN; the
// first lock on a connection reads whether it is direct, so the statement
// is prepared by the second. Behind PgBouncer, where the next transaction
// may run on another server connection, nothing is ever prepared. A
// statement the application dropped (DEALLOCATE, pgx's DeallocateAll) is prepared
// again within the call, which the observer sees as one acquisition.
func TestPreparedTryLock(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			db := testdb.Open(t, k)
			db.SetMaxOpenConns(1) // one connection: every call reuses it
			other := testdb.Open(t, k)
			t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db, other) })
			key, pair := keys.Name(t.Name()), keys.Pair(-7, 2147483647)
			int8Stmt, int4Stmt := "ormlock_pg_try_advisory_xact_lock_int8", "ormlock_pg_try_advisory_xact_lock_int4"

			var want [][]string
			if k == testdb.Postgres {
				want = [][]string{nil, {int8Stmt}, {int8Stmt}, {int4Stmt, int8Stmt}, {int4Stmt, int8Stmt}}
			} else {
				want = [][]string{nil, nil, nil, nil, nil}
			}
			for i, kk := range []keys.Key{key, key, key, pair, pair} {
				if got := lockOnce(t, db, other, kk, nil); !slices.Equal(got, want[i]) {
					t.Fatalf("call %d (%v): prepared %q, want %q", i+1, kk, got, want[i])
				}
			}
			if k != testdb.Postgres {
				return
			}
			drops := map[string]func(c *pgx.Conn) error{
				"DEALLOCATE": func(c *pgx.Conn) error {
					_, err := c.Exec(context.Background(), "DEALLOCATE "+int8Stmt, pgx.QueryExecModeSimpleProtocol)
					return err
				},
				"pgx's DeallocateAll": func(c *pgx.Conn) error { return c.DeallocateAll(context.Background()) },
			}
			for drop, f := range drops {
				conn, err := db.Conn(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				err = conn.Raw(func(dc any) error { return f(dc.(*stdlib.Conn).Conn()) })
				_ = conn.Close()
				if err != nil {
					t.Fatalf("%s: %v", drop, err)
				}
				rec := &testdb.Recorder{}
				got := lockOnce(t, db, other, key, rec)
				if !slices.Contains(got, int8Stmt) {
					t.Fatalf("after %s: prepared %q, want %s again", drop, got, int8Stmt)
				}
				wantEvents := []ormlock.EventKind{ormlock.EventAttempt, ormlock.EventAcquired, ormlock.EventReleased}
				if ev := rec.Kinds(); !slices.Equal(ev, wantEvents) {
					t.Fatalf("after %s: events %v, want %v", drop, ev, wantEvents)
				}
			}
			// a statement that is there although the connection's record
			// says it is not (a PREPARE whose answer was lost) is used as
			// it is, within the call
			fresh := testdb.Open(t, k)
			fresh.SetMaxOpenConns(1)
			t.Cleanup(func() { testdb.AssertNoLeaks(t, k, fresh) })
			lockOnce(t, fresh, other, key, nil) // learns the connection is direct
			if _, err := fresh.Exec("PREPARE " + int8Stmt + "(int8) AS SELECT pg_try_advisory_xact_lock($1), current_setting('transaction_isolation')"); err != nil {
				t.Fatal(err)
			}
			rec := &testdb.Recorder{}
			if got := lockOnce(t, fresh, other, key, rec); !slices.Equal(got, []string{int8Stmt}) {
				t.Fatalf("after an unrecorded PREPARE: prepared %q, want %s", got, int8Stmt)
			}
			if ev := rec.Kinds(); !slices.Equal(ev, []ormlock.EventKind{ormlock.EventAttempt, ormlock.EventAcquired, ormlock.EventReleased}) {
				t.Fatalf("after an unrecorded PREPARE: events %v", ev)
			}
			lockOnce(t, fresh, other, key, nil)

			// a loser on the prepared statement leaves the connection idle,
			// back in the pool
			release := testdb.RawHold(t, k, "", t.Name())
			op, _ := lockproto.NewOp(lockproto.Postgres, "Transaction", key, config.Config{})
			if _, err := op.BeginLocked(context.Background(), db, nil); !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Fatalf("loser: %v", err)
			}
			release()
			if s := db.Stats(); s.InUse != 0 || s.OpenConnections != 1 {
				t.Fatalf("loser's connection not back in the pool: %+v", s)
			}
		})
	}
}

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
				key := keys.Name(t.Name())
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
