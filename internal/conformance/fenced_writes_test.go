package conformance_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/enttest"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/pgxlock"
)

// fencedWrite is the recipe of docs/PROTOCOL.md (Fenced writes), run in
// fn's transaction and checked with the adapter's CheckFenced: the row
// takes the write while its fence is at most tok.
func fencedWrite(k testdb.Kind, tx txn, table string, id int, v string, tok int64) error {
	q := "UPDATE " + table + " SET v = ?, fence = ? WHERE id = ? AND fence <= ?"
	switch tx := tx.(type) {
	case gormTx:
		return gormlock.CheckFenced(tx.tx.Exec(q, v, tok, id, tok))
	case entTx:
		if k.Dialect() == "postgres" {
			q = "UPDATE " + table + " SET v = $1, fence = $2 WHERE id = $3 AND fence <= $4"
		}
		return ormlock.CheckFenced(tx.tx.ExecContext(tx.ctx, q, v, tok, id, tok))
	case sqlTx:
		if k.Dialect() == "postgres" {
			q = "UPDATE " + table + " SET v = $1, fence = $2 WHERE id = $3 AND fence <= $4"
		}
		return ormlock.CheckFenced(tx.tx.ExecContext(tx.ctx, q, v, tok, id, tok))
	case pgxTx:
		q = "UPDATE " + table + " SET v = $1, fence = $2 WHERE id = $3 AND fence <= $4"
		return pgxlock.CheckFenced(tx.tx.Exec(tx.ctx, q, v, tok, id, tok))
	}
	panic("unknown txn")
}

// TestFencedWrites: under one token a holder writes a fenced row as often
// as it likes, the same values included (on MySQL/MariaDB with
// clientFoundRows=true in the DSN, as the recipe says); a greater token
// writes after it; a smaller one is refused with ErrStaleToken, whose text
// does not claim more than it knows.
func TestFencedWrites(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		var r runner
		if k.Dialect() == "mysql" {
			enttest.Migrate(t, k)
			db := openWith(t, k, "clientFoundRows=true")
			defer closeChecked(t, k, db)
			r = a.on(t, k.Dialect(), db)
		} else {
			r = openRunner(t, a, k)
		}
		tbl := ormlock.WithLedgerTable(ledgerTable(t, k, r))
		table := testdb.Table(t, k, "fenced")
		admin := testdb.AdminDB(t, k)
		if _, err := admin.Exec("CREATE TABLE " + table + " (id int PRIMARY KEY, v varchar(32) NOT NULL, fence bigint NOT NULL)"); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Exec("INSERT INTO " + table + " (id, v, fence) VALUES (1, '', 0)"); err != nil {
			t.Fatal(err)
		}
		key := "fenced-writes-" + a.name + "-" + string(k)
		var first int64
		err := r.Transaction(ctx, key, func(tx txn) error {
			first, _ = tx.FencingToken()
			for i := range 3 { // the same values, three times
				if err := fencedWrite(k, tx, table, 1, "a", first); err != nil {
					t.Errorf("write %d under token %d: %v", i+1, first, err)
				}
			}
			return nil
		}, tbl, ormlock.WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		err = r.Transaction(ctx, key, func(tx txn) error {
			tok, _ := tx.FencingToken()
			return fencedWrite(k, tx, table, 1, "b", tok)
		}, tbl, ormlock.WithFencing())
		if err != nil {
			t.Fatalf("write under a greater token: %v", err)
		}
		err = r.Transaction(ctx, key, func(tx txn) error {
			// a holder that lost its lock writes with its older token
			return fencedWrite(k, tx, table, 1, "stale", first)
		})
		if !errors.Is(err, ormlock.ErrStaleToken) {
			t.Fatalf("write under the smaller token %d: %v, want ErrStaleToken", first, err)
		}
		if msg := err.Error(); strings.Contains(msg, "lock was lost") {
			t.Errorf("ErrStaleToken's text claims a lost lock: %q", msg)
		}
		var v string
		if err := admin.QueryRow("SELECT v FROM " + table + " WHERE id = 1").Scan(&v); err != nil || v != "b" {
			t.Errorf("row: v %q (%v), want \"b\"", v, err)
		}
	})
}
