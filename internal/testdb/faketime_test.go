package testdb_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/ormlock/ormlock/internal/testdb"
)

// TestFakedClock starts each kind under libfaketime and steps its clock
// forward while it runs: the clock a lease's expiry reads
// (clock_timestamp() and now() on PostgreSQL, also behind PgBouncer;
// SYSDATE(6) and NOW(6) on MariaDB) moves by the step, and back.
func TestFakedClock(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		s := testdb.StartFaked(t, k)
		c := s.Clock()
		if c == nil {
			t.Fatal("Clock() = nil for a faked server")
		}
		if d := s.Skew(t); d < -time.Second || d > time.Second {
			t.Fatalf("skew before any step: %v, want about 0", d)
		}
		c.Step(t, 30*time.Second)
		c.Step(t, 5*time.Second)
		if got := c.Offset(); got != 35*time.Second {
			t.Errorf("Offset() = %v, want 35s", got)
		}
		// the statement's own time moved too, through the clients' DSN
		db, err := sql.Open(k.Driver(), s.DSN())
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		q := "SELECT extract(epoch FROM now())::float8"
		if k == testdb.MariaDB {
			q = "SELECT UNIX_TIMESTAMP(NOW(6))"
		}
		var secs float64
		if err := db.QueryRowContext(ctx(t), q).Scan(&secs); err != nil {
			t.Fatal(err)
		}
		if d := time.Until(time.Unix(0, int64(secs*1e9))); d < 34*time.Second || d > 36*time.Second {
			t.Errorf("%s through the clients' DSN is %v ahead, want about 35s", q, d)
		}
		c.Set(t, 0)
		t.Logf("figure: %s under libfaketime: clock stepped +30s, +5s and back while running, skew now %v", k, s.Skew(t))
	})
}
