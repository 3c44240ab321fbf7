package conformance_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/enttest"
	"github.com/ormlock/ormlock/internal/testdb"
)

// A wait meets the server's own limits: a statement timeout shorter than
// it, and PostgreSQL's largest lock_timeout.

// A server statement timeout (set in the DSN) shorter than the wait, the
// lock held elsewhere: not acquired, with the server's error kept in the
// chain. PgBouncer refuses the startup parameter; gormlock's
// TestNestedStatementTimeoutIsNotAcquired sets it in an outer transaction.
func TestStatementTimeoutIsNotAcquired(t *testing.T) {
	forKinds(t, []testdb.Kind{testdb.Postgres, testdb.MariaDB}, func(t *testing.T, a adapter, k testdb.Kind) {
		if !runsOn(a, k) {
			t.Skip("PostgreSQL only")
		}
		key := "stmt-timeout-" + t.Name()
		defer testdb.RawHold(t, k, "", key)()
		param := "statement_timeout=300"
		if k == testdb.MariaDB {
			param = "max_statement_time=0.3"
		}
		enttest.Migrate(t, k)
		db := openWith(t, k, param)
		t.Cleanup(func() { closeChecked(t, k, db) })
		r := a.on(t, k.Dialect(), db)
		err := r.Transaction(context.Background(), key, func(txn) error { return nil }, ormlock.WithWait(5*time.Second))
		if !errors.Is(err, ormlock.ErrNotAcquired) {
			t.Fatalf("Transaction: %v, want ErrNotAcquired", err)
		}
		var state interface{ SQLState() string }
		var me *gomysql.MySQLError
		if !(errors.As(err, &state) && state.SQLState() == "57014") && !(errors.As(err, &me) && me.Number == 1969) &&
			!(k == testdb.MariaDB && strings.Contains(err.Error(), "GET_LOCK returned NULL")) {
			t.Fatalf("Transaction: %v, want the server's timeout error in the chain", err)
		}
	})
}

// A wait longer than PostgreSQL's largest lock_timeout (about 24.8 days)
// is clamped, not refused.
func TestWaitBeyondLockTimeoutMax(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := a.open(t, k)
		ran := false
		err := r.Transaction(context.Background(), "long-wait-"+t.Name(), func(txn) error { ran = true; return nil },
			ormlock.WithWait(30*24*time.Hour))
		if err != nil || !ran {
			t.Fatalf("Transaction: %v (ran %v)", err, ran)
		}
	})
}
