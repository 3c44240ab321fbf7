package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/sqllock"
)

// sqllock.CheckFenced, on every server: the holder writes a fenced row as
// often as it likes under its token; a smaller token is refused with
// ErrStaleToken; a failed statement keeps its own error. On MariaDB a DSN
// without clientFoundRows=true counts a write of the same values as no row,
// and the refusal says that the DSN is the cause.
func TestCheckFenced(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		mysql := k.Dialect() == "mysql"
		var db *sql.DB
		if mysql {
			db = openParams(t, k, "clientFoundRows=true")
		} else {
			db = testdb.Open(t, k)
		}
		ledger := testdb.Table(t, k, "sqlfence")
		tbl := ormlock.WithLedgerTable(ledger)
		if err := sqllock.Migrate(ctx, db, tbl); err != nil {
			t.Fatal(err)
		}
		res := testdb.Table(t, k, "sqlfenced")
		admin := testdb.AdminDB(t, k)
		if _, err := admin.Exec("CREATE TABLE " + res + " (id int PRIMARY KEY, v varchar(32) NOT NULL, fence bigint NOT NULL)"); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Exec("INSERT INTO " + res + " (id, v, fence) VALUES (1, '', 0)"); err != nil {
			t.Fatal(err)
		}
		update := "UPDATE " + res + " SET v = $1, fence = $2 WHERE id = 1 AND fence <= $2"
		if mysql {
			update = "UPDATE " + res + " SET v = ?, fence = ? WHERE id = 1 AND fence <= ?"
		}
		write := func(ctx context.Context, q interface {
			ExecContext(context.Context, string, ...any) (sql.Result, error)
		}, v string, tok int64) error {
			if mysql {
				return sqllock.CheckFenced(q.ExecContext(ctx, update, v, tok, tok))
			}
			return sqllock.CheckFenced(q.ExecContext(ctx, update, v, tok))
		}
		key := "sqllock-fenced-" + string(k)
		var first int64
		err := sqllock.Transaction(ctx, db, key, func(ctx context.Context, tx *sql.Tx) error {
			tok, ok := ormlock.FencingToken(ctx)
			if !ok {
				return errors.New("no token in fn's ctx")
			}
			first = tok
			for range 3 { // the same values, three times
				if err := write(ctx, tx, "a", tok); err != nil {
					return err
				}
			}
			return nil
		}, tbl, ormlock.WithFencing())
		if err != nil {
			t.Fatalf("writes under one token: %v", err)
		}
		err = sqllock.Session(ctx, db, key, func(ctx context.Context) error {
			tok, _ := ormlock.FencingToken(ctx)
			return write(ctx, db, "b", tok)
		}, tbl, ormlock.WithFencing())
		if err != nil {
			t.Fatalf("write under a greater token: %v", err)
		}
		err = write(ctx, db, "stale", first)
		if !errors.Is(err, ormlock.ErrStaleToken) {
			t.Fatalf("write under the smaller token: %v, want ErrStaleToken", err)
		}
		if got := strings.Contains(err.Error(), "clientFoundRows=true"); got != mysql {
			t.Errorf("the refusal names clientFoundRows: %v, want %v: %s", got, mysql, err)
		}
		if err := sqllock.CheckFenced(db.ExecContext(ctx, "UPDATE no_such_table_sqllock SET v = 1")); err == nil || errors.Is(err, ormlock.ErrStaleToken) {
			t.Errorf("failed statement: %v, want its own error", err)
		}
		if !mysql {
			return
		}
		// Without clientFoundRows=true the same values again count as no
		// row, and the refusal names the DSN as the cause.
		plain := testdb.Open(t, k)
		var tok int64
		err = sqllock.Transaction(ctx, plain, key, func(ctx context.Context, tx *sql.Tx) error {
			tok, _ = ormlock.FencingToken(ctx)
			if err := write(ctx, tx, "c", tok); err != nil {
				return err
			}
			return write(ctx, tx, "c", tok)
		}, tbl, ormlock.WithFencing())
		if !errors.Is(err, ormlock.ErrStaleToken) {
			t.Fatalf("the same values again without clientFoundRows: %v, want ErrStaleToken", err)
		}
		if msg := err.Error(); !strings.Contains(msg, "the DSN lacks clientFoundRows=true") || !strings.Contains(msg, "add clientFoundRows=true to the DSN") {
			t.Errorf("the refusal does not name the DSN cause: %s", msg)
		}
	})
}

// openParams opens a pool on the shared server of kind k with params added
// to its DSN, closed at cleanup.
func openParams(t *testing.T, k testdb.Kind, params string) *sql.DB {
	t.Helper()
	db, err := sql.Open(k.Driver(), testdb.WithParams(testdb.DSN(t, k), params))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		testdb.AssertNoLeaks(t, k, db)
		db.Close()
	})
	return db
}
