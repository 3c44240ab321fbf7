package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
)

// Settings of the user's pool that the protocol meets: a server statement
// timeout shorter than the wait, PostgreSQL's largest lock_timeout, and the
// MySQL driver's DSN variants.

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

// The MySQL driver's DSN settings that change what the server and driver
// answer, on every adapter over go-sql-driver/mysql: without parseTime the
// ledger's times come back as text; with clientFoundRows an UPDATE counts
// matched rows; with interpolateParams arguments are written into the
// statement text. Fencing, RunOnce, Runs and Prune work the same on each.
func TestMySQLDSNVariants(t *testing.T) {
	k := testdb.MariaDB
	base := testdb.DSN(t, k)
	variants := map[string]string{
		"parseTime off":     strings.Replace(base, "parseTime=true&loc=UTC", "parseTime=false", 1),
		"clientFoundRows":   base + "&clientFoundRows=true",
		"interpolateParams": base + "&interpolateParams=true",
	}
	for _, a := range adapters {
		if !runsOn(a, k) {
			continue
		}
		for name, dsn := range variants {
			t.Run(a.name+"/"+name, func(t *testing.T) {
				enttest.Migrate(t, k)
				db, err := sql.Open("mysql", dsn)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
				t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
				r := a.on(t, k.Dialect(), db)
				ctx := context.Background()
				tbl := testdb.Table(t, k, "s")
				opts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithFencing()}
				if err := r.Migrate(ctx, opts...); err != nil {
					t.Fatalf("Migrate: %v", err)
				}
				key := "dsn-" + t.Name()
				var tokens []int64
				for range 2 {
					err := r.Transaction(ctx, key, func(tx txn) error {
						tok, ok := tx.FencingToken()
						if !ok {
							return errors.New("no fencing token in fn's transaction")
						}
						tokens = append(tokens, tok)
						return nil
					}, opts...)
					if err != nil {
						t.Fatalf("Transaction: %v", err)
					}
				}
				if tokens[1] <= tokens[0] {
					t.Fatalf("tokens %v do not grow", tokens)
				}
				slot := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
				runs := 0
				for range 2 {
					err := r.RunOnce(ctx, "dsn-job", slot, func(txn) error {
						runs++
						return nil
					}, opts...)
					if err != nil && !errors.Is(err, ormlock.ErrAlreadyDone) {
						t.Fatalf("RunOnce: %v", err)
					}
				}
				if runs != 1 {
					t.Fatalf("fn ran %d times for one slot, want 1", runs)
				}
				rs, err := r.Runs(ctx, "dsn-job", 10, opts...)
				if err != nil || len(rs) != 1 || !rs[0].Slot.Equal(slot) || rs[0].Status != "done" {
					t.Fatalf("Runs = %+v, %v; want the one done run of %v", rs, err, slot)
				}
				if n, err := r.Prune(ctx, time.Hour, opts...); err != nil || n != 1 {
					t.Fatalf("Prune = %d, %v; want 1", n, err)
				}
			})
		}
	}
}
