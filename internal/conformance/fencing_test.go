package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// txToken runs a fenced Transaction on key and returns fn's token; fail
// makes fn return an error (the transaction rolls back).
func txToken(t *testing.T, l locker, key any, fail bool, opts ...ormlock.Option) int64 {
	t.Helper()
	var tok int64
	errFail := errors.New("fn failed")
	err := l.Transaction(context.Background(), key, func(tx txn) error {
		var ok bool
		if tok, ok = tx.FencingToken(); !ok {
			t.Errorf("Transaction: no fencing token in tx")
		}
		if fail {
			return errFail
		}
		return nil
	}, append(opts, ormlock.WithFencing())...)
	if fail && !errors.Is(err, errFail) || !fail && err != nil {
		t.Fatalf("Transaction: %v", err)
	}
	return tok
}

// TestFencingVerbs checks that every verb hands fn a token greater than the
// last one of its key (from the adapter's FencingToken of fn's transaction,
// and from a Session's ctx), after commits, rollbacks and panics, at every
// isolation level; that keys, namespaces and jobs count apart; and that the
// counter is the fence table's row (namespace, "name:"+key), which the
// adapters share.
func TestFencingVerbs(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r := openRunner(t, a, k)
		name := ledgerTable(t, k, r)
		tbl := ormlock.WithLedgerTable(name)
		key := "fence-verbs-" + string(k)
		last := int64(0)
		next := func(what string, tok int64) {
			t.Helper()
			if tok <= last {
				t.Fatalf("%s: token %d is not greater than the last one, %d", what, tok, last)
			}
			last = tok
		}
		next("commit", txToken(t, r, key, false, tbl))
		next("rollback", txToken(t, r, key, true, tbl))
		next("after rollback", txToken(t, r, key, false, tbl))
		for _, iso := range []sql.IsolationLevel{sql.LevelRepeatableRead, sql.LevelSerializable} {
			next(iso.String(), txToken(t, r, key, false, tbl, ormlock.WithTxOptions(&sql.TxOptions{Isolation: iso})))
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("panic did not go on")
				}
			}()
			_ = r.Transaction(ctx, key, func(tx txn) error {
				tok, _ := tx.FencingToken()
				next("panic", tok)
				panic("boom")
			}, tbl, ormlock.WithFencing())
		}()
		err := r.Session(ctx, key, func(ctx context.Context) error {
			tok, ok := ormlock.FencingToken(ctx)
			if !ok {
				t.Error("Session: no token in ctx")
			}
			next("session", tok)
			return nil
		}, tbl, ormlock.WithFencing())
		if err != nil {
			t.Fatalf("Session: %v", err)
		}
		next("after session", txToken(t, r, key, false, tbl))

		// without WithFencing: no token
		if err := r.Transaction(ctx, key, func(tx txn) error {
			if _, ok := tx.FencingToken(); ok {
				t.Error("token without WithFencing")
			}
			return nil
		}, tbl); err != nil {
			t.Fatal(err)
		}
		// the counter is the fence table's row
		var stored int64
		q := "SELECT token FROM " + name + "_fence WHERE namespace = '' AND lock_key = ?"
		if k.Dialect() == "postgres" {
			q = strings.Replace(q, "?", "$1", 1)
		}
		if err := testdb.AdminDB(t, k).QueryRow(q, "name:"+key).Scan(&stored); err != nil || stored != last {
			t.Errorf("fence row of %q: token %d (%v), want %d", key, stored, err, last)
		}
		// another namespace, another key: counters of their own
		if tok := txToken(t, r, key, false, tbl, ormlock.WithNamespace("fence-ns")); tok != 1 {
			t.Errorf("first token in a new namespace = %d, want 1", tok)
		}
		if tok := txToken(t, r, key+"-other", false, tbl); tok != 1 {
			t.Errorf("first token of a new key = %d, want 1", tok)
		}

		// RunOnce: one counter per job, across slots and modes
		job := "fence-job-" + string(k)
		lastJob := int64(0)
		for i, claim := range []bool{false, true, false, true} {
			opts := []ormlock.Option{tbl, ormlock.WithFencing()}
			if claim {
				opts = append(opts, ormlock.WithClaim())
			}
			err := r.RunOnce(ctx, job, testdb.Slot(i), func(tx txn) error {
				tok, ok := tx.FencingToken()
				if !ok || tok <= lastJob {
					t.Errorf("RunOnce slot %d (claim %v): token %d (ok %v), last %d", i, claim, tok, ok, lastJob)
				}
				lastJob = tok
				return nil
			}, opts...)
			if err != nil {
				t.Fatalf("RunOnce slot %d: %v", i, err)
			}
		}
	})
}

// TestFencingRefused checks what is refused before any lock is taken: a
// PostgreSQL pool of one connection (the token needs a second), and a
// missing fence table (Migrate not run), which releases the lock.
func TestFencingRefused(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r := openRunner(t, a, k)
		key := "fence-refused-" + string(k)
		called := false
		fn := func(txn) error { called = true; return nil }

		err := r.Transaction(ctx, key, fn, ormlock.WithFencing(), ormlock.WithLedgerTable("no_such_ledger"))
		if err == nil || called {
			t.Fatalf("missing fence table: err %v, fn called %v", err, called)
		}
		if !free(t, k, key) {
			t.Fatal("lock left held after a failed issuance")
		}
		err = r.Session(ctx, key, func(context.Context) error { called = true; return nil },
			ormlock.WithFencing(), ormlock.WithLedgerTable("no_such_ledger"))
		if err == nil || called {
			t.Fatalf("Session, missing fence table: err %v, fn called %v", err, called)
		}
		long := "l123456789012345678901234567890123456789012345678901234567890"
		if err := r.Transaction(ctx, key, fn, ormlock.WithFencing(), ormlock.WithLedgerTable(long)); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Fatalf("ledger name too long for the fence table: %v", err)
		}

		if k.Dialect() != "postgres" {
			return
		}
		tbl := ormlock.WithLedgerTable(ledgerTable(t, k, r))
		r.Pool().SetMaxOpenConns(1)
		defer r.Pool().SetMaxOpenConns(0)
		for name, call := range map[string]func() error{
			"Transaction": func() error { return r.Transaction(ctx, key, fn, tbl, ormlock.WithFencing()) },
			"Session": func() error {
				return r.Session(ctx, key, func(context.Context) error { called = true; return nil }, tbl, ormlock.WithFencing())
			},
			"RunOnce": func() error { return r.RunOnce(ctx, key, testdb.Slot(0), fn, tbl, ormlock.WithFencing()) },
		} {
			if err := call(); !errors.Is(err, ormlock.ErrInvalidArgument) || called {
				t.Errorf("%s on a pool of one: err %v, fn called %v", name, err, called)
			}
		}
	})
}
