package testdb_test

import (
	"os"
	"strings"
	"testing"

	"github.com/ormlock/ormlock/internal/testdb"
)

// TestLeaksExactPerKind: the Postgres and PgBouncer kinds share one
// PostgreSQL server but not a database, so a lock held through one kind is a
// leak for that kind only. Tests of the two kinds running in parallel (the
// scheduler module's forEachKind) cannot see each other's locks, and a lock
// left through either is still reported.
func TestLeaksExactPerKind(t *testing.T) {
	for _, env := range []string{"ORMLOCK_TEST_POSTGRES_DSN", "ORMLOCK_TEST_PGBOUNCER_DSN"} {
		if os.Getenv(env) != "" {
			t.Skipf("%s is set: the kinds are external servers, whose databases testdb does not choose", env)
		}
	}
	for _, c := range []struct{ holder, other testdb.Kind }{
		{testdb.PgBouncer, testdb.Postgres},
		{testdb.Postgres, testdb.PgBouncer},
	} {
		t.Run(string(c.holder), func(t *testing.T) {
			db := testdb.Open(t, c.holder)
			tx, err := db.BeginTx(ctx(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			var ok bool
			if err := tx.QueryRowContext(ctx(t), "SELECT pg_try_advisory_xact_lock(424242)").Scan(&ok); err != nil || !ok {
				t.Fatalf("lock: %v %v", ok, err)
			}
			if err := testdb.Leaks(c.other, testdb.Open(t, c.other)); err != nil {
				t.Errorf("Leaks(%s) while %s holds a lock: %v; want nil (another kind's database)", c.other, c.holder, err)
			}
			err = testdb.Leaks(c.holder)
			if err == nil || !strings.Contains(err.Error(), "key=424242") {
				t.Errorf("Leaks(%s) while it holds a lock: %v; want the lock reported", c.holder, err)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			testdb.AssertNoLeaks(t, c.holder, db)
		})
	}
}
