package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
	"github.com/ormlock/ormlock/pgxlock"
	"github.com/ormlock/ormlock/sqllock"
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

// pgLockRow is the pg_locks row of the advisory lock of k (in no
// namespace): classid, objid and objsubid.
func pgLockRow(k ormlock.Key) (classid, objid int64, sub int) {
	pk := keys.Postgres(keys.Key(k), "")
	if pk.IsPair {
		return int64(uint32(pk.ClassID)), int64(uint32(pk.ObjID)), 2
	}
	return int64(uint32(uint64(pk.Int64) >> 32)), int64(uint32(pk.Int64)), 1
}

// pgLockPID returns the pid of the backend that holds the advisory lock of
// k (in no namespace) on the server of kind k, through the admin pool.
func pgLockPID(t *testing.T, kind testdb.Kind, k ormlock.Key) int64 {
	t.Helper()
	classid, objid, sub := pgLockRow(k)
	var pid int64
	err := testdb.AdminDB(t, kind).QueryRow(`SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND classid::int8 = $1 AND objid::int8 = $2 AND objsubid = $3`, classid, objid, sub).Scan(&pid)
	if err != nil {
		t.Fatalf("find the backend holding %s: %v", k, err)
	}
	return pid
}

// awaitPgWaiter returns once a backend waits for the advisory lock of k
// (in no namespace) on the server of kind k: the server's own view of a
// blocked waiter, instead of a sleep.
func awaitPgWaiter(t *testing.T, kind testdb.Kind, k ormlock.Key) {
	t.Helper()
	classid, objid, sub := pgLockRow(k)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var n int
		err := testdb.AdminDB(t, kind).QueryRow(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND classid::int8 = $1 AND objid::int8 = $2 AND objsubid = $3`, classid, objid, sub).Scan(&n)
		if err != nil {
			t.Fatalf("look for a waiter on %s: %v", k, err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no backend waits for %s after 10s", k)
		}
	}
}

// TestFencingLockLostBeforeToken: on PostgreSQL the token is committed on a
// second connection while the lock stays on the first. When the lock's
// backend dies after the lock was granted and before the token is issued,
// and another holder takes the lock and its token meanwhile, the first
// holder must not get a greater token and run fn with it: its call fails
// with an error wrapping ErrLockLost, fn is not called, and the lock and
// its connections are left clean. Every verb and mode that issues tokens
// is covered (Transaction at READ COMMITTED and REPEATABLE READ, Session,
// RunOnce in both modes).
func TestFencingLockLostBeforeToken(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		other := a.with(t, k)
		tbl := ormlock.WithLedgerTable(ledgerTable(t, k, other))
		type call func(r runner, key string, fn func(), opts ...ormlock.Option) error
		tx := func(iso sql.IsolationLevel) call {
			return func(r runner, key string, fn func(), opts ...ormlock.Option) error {
				opts = append(opts, ormlock.WithTxOptions(&sql.TxOptions{Isolation: iso}))
				return r.Transaction(ctx, key, func(txn) error { fn(); return nil }, opts...)
			}
		}
		runOnce := func(claim bool) call {
			return func(r runner, key string, fn func(), opts ...ormlock.Option) error {
				if claim {
					opts = append(opts, ormlock.WithClaim())
				}
				return r.RunOnce(ctx, key, testdb.Slot(0), func(txn) error { fn(); return nil }, opts...)
			}
		}
		cases := map[string]call{
			"Transaction":                tx(sql.LevelDefault),
			"Transaction/RepeatableRead": tx(sql.LevelRepeatableRead),
			"Session": func(r runner, key string, fn func(), opts ...ormlock.Option) error {
				return r.Session(ctx, key, func(context.Context) error { fn(); return nil }, opts...)
			},
			"RunOnce":       runOnce(false),
			"RunOnce/Claim": runOnce(true),
		}
		for name, c := range cases {
			t.Run(name, func(t *testing.T) {
				key := "fence-lost-" + strings.ReplaceAll(name, "/", "-") + "-" + a.name + "-" + string(k)
				var fired atomic.Bool
				obs := ormlock.ObserverFunc(func(_ context.Context, e ormlock.Event) {
					if e.Kind != ormlock.EventAcquired || fired.Swap(true) {
						return
					}
					// the lock is granted, the token not issued yet: the
					// lock's backend dies, another holder takes the lock
					// and its token
					pid := pgLockPID(t, k, e.Key)
					testdb.Kill(t, k, pid)
					testdb.WaitGone(t, k, pid)
					if err := c(other, key, func() {}, tbl, ormlock.WithFencing()); err != nil {
						t.Errorf("the next holder: %v", err)
					}
				})
				r := a.with(t, k, ormlock.WithObserver(obs))
				called := false
				err := c(r, key, func() { called = true }, tbl, ormlock.WithFencing())
				if called {
					t.Error("fn ran with a token issued after its lock was lost (and after the next holder's)")
				}
				if !errors.Is(err, ormlock.ErrLockLost) {
					t.Errorf("err = %v, want ErrLockLost", err)
				}
				if err != nil && strings.Count(err.Error(), "ormlock: ") != 1 {
					t.Errorf("error %q should say \"ormlock: \" once", err)
				}
				if !fired.Load() {
					t.Fatal("the lock was never acquired")
				}
				if !free(t, k, key) && !strings.HasPrefix(name, "RunOnce") {
					t.Error("lock left held")
				}
			})
		}
	})
}

// TestFencingNumericKeys: the issuance's check that the lock's backend
// holds the lock finds numeric keys and pairs (negative halves included) as
// pg_locks shows them.
func TestFencingNumericKeys(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := a.with(t, k)
		tbl := ormlock.WithLedgerTable(ledgerTable(t, k, r))
		for _, key := range []ormlock.Key{ormlock.ID(-5), ormlock.ID(1 << 40), ormlock.Pair(-1, -2), ormlock.Pair(7, 1<<30)} {
			if tok := txToken(t, r, key, false, tbl); tok != 1 {
				t.Errorf("%s: first token %d, want 1", key, tok)
			}
		}
	})
}

// openWith opens a pool on the server of kind k whose DSN has the extra
// parameters params ("autocommit=0"). The caller closes it with
// closeChecked before the test's clean-ups run (the pool's idle
// connections would keep the metadata locks of an open transaction).
func openWith(t *testing.T, k testdb.Kind, params string) *sql.DB {
	t.Helper()
	db, err := sql.Open(k.Driver(), testdb.WithParams(testdb.DSN(t, k), params))
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// closeChecked checks db for leaks and closes it.
func closeChecked(t *testing.T, k testdb.Kind, db *sql.DB) {
	t.Helper()
	testdb.AssertNoLeaks(t, k, db)
	db.Close()
}

// committedToken reads the fence counter id (FenceID: "name:key",
// "job:job") of the ledger table tbl as another session sees it: what was
// committed.
func committedToken(t *testing.T, k testdb.Kind, tbl, id string) int64 {
	t.Helper()
	q := "SELECT token FROM " + tbl + "_fence WHERE namespace = '' AND lock_key = ?"
	if k.Dialect() == "postgres" {
		q = strings.Replace(q, "?", "$1", 1)
	}
	var tok int64
	if err := testdb.AdminDB(t, k).QueryRow(q, id).Scan(&tok); err != nil && !errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("read the fence counter %q: %v", id, err)
	}
	return tok
}

// TestFencingAutocommitOff: on MySQL/MariaDB the token is drawn on the
// lock's connection; with autocommit off (autocommit=0 in the DSN, or the
// server's default) it must still be committed before fn runs, by every
// verb and mode, so that a crash cannot make it be issued again.
func TestFencingAutocommitOff(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			k := testdb.MariaDB
			enttest.Migrate(t, k)
			db := openWith(t, k, "autocommit=0")
			defer closeChecked(t, k, db)
			r := a.on(t, k.Dialect(), db)
			tbl := ledgerTable(t, k, r)
			opts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithFencing()}
			ctx := context.Background()
			key := "fence-autocommit-" + a.name
			check := func(what, id string, tok int64, ok bool) {
				t.Helper()
				if !ok {
					t.Errorf("%s: no token", what)
				}
				if got := committedToken(t, k, tbl, id); got != tok {
					t.Errorf("%s: fn runs with token %d, but the committed counter is %d", what, tok, got)
				}
			}
			if err := r.Transaction(ctx, key, func(tx txn) error {
				tok, ok := tx.FencingToken()
				check("Transaction", "name:"+key, tok, ok)
				return nil
			}, opts...); err != nil {
				t.Fatalf("Transaction: %v", err)
			}
			if err := r.Session(ctx, key, func(ctx context.Context) error {
				tok, ok := ormlock.FencingToken(ctx)
				check("Session", "name:"+key, tok, ok)
				return nil
			}, opts...); err != nil {
				t.Fatalf("Session: %v", err)
			}
			// a shared lock connection reads its session's autocommit when
			// it opens, and commits the token itself where it is off
			if err := r.Session(ctx, key, func(ctx context.Context) error {
				tok, ok := ormlock.FencingToken(ctx)
				check("Session on a shared lock connection", "name:"+key, tok, ok)
				return nil
			}, append(opts[:len(opts):len(opts)], ormlock.WithSharedLockConns(1))...); err != nil {
				t.Fatalf("Session on a shared lock connection: %v", err)
			}
			job := "fence-autocommit-job-" + a.name
			for i, claim := range []bool{false, true} {
				o := opts
				if claim {
					o = append(o[:len(o):len(o)], ormlock.WithClaim())
				}
				if err := r.RunOnce(ctx, job, testdb.Slot(i), func(tx txn) error {
					tok, ok := tx.FencingToken()
					check("RunOnce", "job:"+job, tok, ok)
					return nil
				}, o...); err != nil {
					t.Fatalf("RunOnce (claim %v): %v", claim, err)
				}
				var n int
				if err := testdb.AdminDB(t, k).QueryRow("SELECT COUNT(*) FROM "+tbl+" WHERE job = ? AND status = 'done'", job).Scan(&n); err != nil || n != i+1 {
					t.Errorf("RunOnce (claim %v): %d committed 'done' rows (%v), want %d", claim, n, err, i+1)
				}
			}
		})
	}
}

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
		return sqllock.CheckFenced(tx.tx.ExecContext(tx.ctx, q, v, tok, id, tok))
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

// TestAdvanceFences: every adapter's AdvanceFences moves every counter of
// the namespace in effect by by (the next token is the last plus by plus
// one), leaves other namespaces alone, and refuses a by outside 1..2^52
// with ErrInvalidArgument. The failover it is for is tested in package
// failover.
func TestAdvanceFences(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r := openRunner(t, a, k)
		tbl := ormlock.WithLedgerTable(ledgerTable(t, k, r))
		other := ormlock.WithNamespace("advance-other")
		tok := func(key string, opts ...ormlock.Option) int64 {
			t.Helper()
			var got int64
			err := r.Transaction(ctx, key, func(tx txn) error {
				got, _ = tx.FencingToken()
				return nil
			}, append([]ormlock.Option{tbl, ormlock.WithFencing()}, opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		a1, b1, o1 := tok("advance-a"), tok("advance-b"), tok("advance-a", other)
		n, err := r.AdvanceFences(ctx, 1000, tbl)
		if err != nil || n != 2 {
			t.Fatalf("AdvanceFences: %d, %v; want 2 counters", n, err)
		}
		if a2, b2, o2 := tok("advance-a"), tok("advance-b"), tok("advance-a", other); a2 != a1+1001 || b2 != b1+1001 || o2 != o1+1 {
			t.Errorf("tokens after AdvanceFences(1000): %d, %d, other namespace %d; want %d, %d, %d", a2, b2, o2, a1+1001, b1+1001, o1+1)
		}
		for _, by := range []int64{0, -1, 1<<52 + 1} {
			if _, err := r.AdvanceFences(ctx, by, tbl); !errors.Is(err, ormlock.ErrInvalidArgument) {
				t.Errorf("AdvanceFences(%d): %v, want ErrInvalidArgument", by, err)
			}
		}
	})
}

// Fencing tokens keep the lock's order through faults: replicas of every
// adapter contending with commits, rollbacks, panics and killed connections;
// a server crash; and a paused holder whose lock was taken over.

// runsOn reports whether adapter a runs on servers of kind k (pgxlock is
// PostgreSQL only).
func runsOn(a adapter, k testdb.Kind) bool { return a.name != "pgxlock" || k.Dialect() == "postgres" }

// tokenLog records the tokens fn saw, in the order the lock let fn run.
type tokenLog struct {
	mu   sync.Mutex
	toks []int64
}

func (l *tokenLog) add(tok int64) {
	l.mu.Lock()
	l.toks = append(l.toks, tok)
	l.mu.Unlock()
}

// TestFencingContention: one replica (pool) of every adapter takes one key
// over and over with Transaction (commit, rollback, panic, a killed
// connection, every isolation level) and Session; each holder records its
// token while it holds the lock, so the record is in lock order, and every
// token must be greater than the one before, whichever adapter drew it. A
// few seconds per server; ORMLOCK_SOAK=1 runs a minute.
func TestFencingContention(t *testing.T) {
	run := 3 * time.Second
	if os.Getenv("ORMLOCK_SOAK") != "" {
		run = time.Minute
	}
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		var rs []runner
		var names []string
		for _, a := range adapters {
			if runsOn(a, k) {
				r := openRunner(t, a, k)
				r.Pool().SetMaxOpenConns(4)
				rs, names = append(rs, r), append(names, a.name)
			}
		}
		tbl := ormlock.WithLedgerTable(ledgerTable(t, k, rs[0]))
		key := "fence-contention-" + string(k)
		var log tokenLog
		counts := map[string]int{}
		var cmu sync.Mutex
		deadline := time.Now().Add(run)
		var wg sync.WaitGroup
		for p, r := range rs {
			for w := range 2 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(p), uint64(w)))
					for time.Now().Before(deadline) {
						what, err := fencedStep(rng, k, r, key, &log, tbl)
						cmu.Lock()
						counts[what]++
						cmu.Unlock()
						if err != nil {
							t.Errorf("%s %s: %v", names[p], what, err)
							return
						}
					}
				})
			}
		}
		wg.Wait()
		log.mu.Lock()
		defer log.mu.Unlock()
		for i := 1; i < len(log.toks); i++ {
			if log.toks[i] <= log.toks[i-1] {
				t.Fatalf("token %d (acquisition %d) after %d", log.toks[i], i, log.toks[i-1])
			}
		}
		if len(log.toks) < 100 {
			t.Fatalf("only %d acquisitions", len(log.toks))
		}
		t.Logf("%d fenced acquisitions by %v in %v, last token %d: %v", len(log.toks), names, run, log.toks[len(log.toks)-1], counts)
	})
}

var errRollback = errors.New("roll back")

// fencedStep runs one random fenced acquisition of key through r and
// reports what it did; the error is an unexpected outcome.
func fencedStep(rng *rand.Rand, k testdb.Kind, r runner, key string, log *tokenLog, tbl ormlock.Option) (string, error) {
	ctx := context.Background()
	opts := []ormlock.Option{tbl, ormlock.WithFencing(), ormlock.WithWait(10 * time.Second)}
	record := func(tok int64, ok bool) error {
		if !ok {
			return errors.New("no token")
		}
		log.add(tok)
		return nil
	}
	switch n := rng.IntN(10); n {
	case 0, 1, 2: // commit, at some isolation level
		o := opts
		if n > 0 {
			o = append(o, ormlock.WithTxOptions(&sql.TxOptions{Isolation: []sql.IsolationLevel{sql.LevelRepeatableRead, sql.LevelSerializable}[n-1]}))
		}
		return "commit", r.Transaction(ctx, key, func(tx txn) error { return record(tx.FencingToken()) }, o...)
	case 3, 4:
		err := r.Transaction(ctx, key, func(tx txn) error {
			if err := record(tx.FencingToken()); err != nil {
				return err
			}
			return errRollback
		}, opts...)
		if errors.Is(err, errRollback) {
			err = nil
		}
		return "rollback", err
	case 5:
		var err error
		func() {
			defer func() {
				if p := recover(); p == nil {
					err = errors.New("panic lost")
				}
			}()
			err = r.Transaction(ctx, key, func(tx txn) error {
				_ = record(tx.FencingToken())
				panic("boom")
			}, opts...)
		}()
		return "panic", err
	case 6: // the holder's connection dies under fn
		err := r.Transaction(ctx, key, func(tx txn) error {
			if err := record(tx.FencingToken()); err != nil {
				return err
			}
			if k.Dialect() == "postgres" {
				return tx.Exec("SELECT pg_terminate_backend(pg_backend_pid())")
			}
			id, err := queryInt(tx, "SELECT CONNECTION_ID()")
			if err != nil {
				return err
			}
			return tx.Exec(fmt.Sprintf("KILL %d", id))
		}, opts...)
		if err == nil {
			return "killed", errors.New("a killed connection committed")
		}
		return "killed", nil
	default:
		return "session", r.Session(ctx, key, func(ctx context.Context) error {
			return record(ormlock.FencingToken(ctx))
		}, opts...)
	}
}

// TestFencingCrash is the durability case: holders of every adapter take
// tokens and roll back (a rolled-back holder may have used its token outside
// the database), the server is killed with SIGKILL at once and restarted,
// and every adapter's next token is greater than every token handed out
// before the crash.
//
// The test servers run with synchronous_commit=off (PostgreSQL), which the
// issuance overrides for its own transaction, and MariaDB with
// innodb_flush_log_at_trx_commit=0, which no session can override: the test
// sets it to 1, the default and what fencing requires (docs/PROTOCOL.md).
func TestFencingCrash(t *testing.T) {
	kinds := testdb.Kinds()
	srvs := testdb.StartAll(t, kinds...)
	for i, k := range kinds {
		t.Run(string(k), func(t *testing.T) {
			s := srvs[i]
			target := s // the server that runs the SQL
			if k == testdb.PgBouncer {
				target = s.Backend()
			}
			admin, err := sql.Open(k.Driver(), target.AdminDSN())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { admin.Close() })
			if k.Dialect() == "mysql" {
				if _, err := admin.Exec("SET GLOBAL innodb_flush_log_at_trx_commit = 1"); err != nil {
					t.Fatal(err)
				}
			}
			rs := openOnPrivate(t, s, "")
			tbl := ormlock.WithLedgerTable(ledgerTable(t, k, rs[0].r))
			ctx := context.Background()
			key := "fence-crash"
			var last int64
			for i := range 50 {
				p := rs[i%len(rs)]
				err := p.r.Transaction(ctx, key, func(tx txn) error {
					tok, _ := tx.FencingToken()
					if tok <= last {
						t.Errorf("%s: token %d after %d", p.a.name, tok, last)
					}
					last = tok
					return errRollback
				}, tbl, ormlock.WithFencing())
				if !errors.Is(err, errRollback) {
					t.Fatalf("%s: holder %d: %v", p.a.name, i, err)
				}
			}
			crash(t, k.Dialect(), admin)
			target.Restart(t)
			for _, p := range rs {
				for _, db := range []*sql.DB{p.db, p.r.Pool()} {
					db.SetMaxIdleConns(0) // drop the pool's broken connections
					db.SetMaxIdleConns(2)
				}
				var after int64
				deadline := time.Now().Add(30 * time.Second)
				for {
					err := p.r.Transaction(ctx, key, func(tx txn) error {
						after, _ = tx.FencingToken()
						return nil
					}, tbl, ormlock.WithFencing())
					if err == nil {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s after restart: %v", p.a.name, err)
					}
					time.Sleep(100 * time.Millisecond)
				}
				if after <= last {
					t.Fatalf("%s: token after the crash %d, not greater than %d, handed out before it", p.a.name, after, last)
				}
				t.Logf("%s: last token before SIGKILL %d, first after restart %d", p.a.name, last, after)
			}
		})
	}
}

// crash SIGKILLs the server admin is connected to: PostgreSQL's postmaster
// and all its children (so no backend outlives it to flush anything), or
// mariadbd. The test runs as the user that started the servers.
func crash(t *testing.T, dialect string, admin *sql.DB) {
	t.Helper()
	var pidFile string
	if dialect == "postgres" {
		var dir string
		if err := admin.QueryRow("SHOW data_directory").Scan(&dir); err != nil {
			t.Fatal(err)
		}
		pidFile = filepath.Join(dir, "postmaster.pid")
	} else if err := admin.QueryRow("SELECT @@pid_file").Scan(&pidFile); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		t.Fatalf("pid file %s: %v", pidFile, err)
	}
	_ = admin.Close()
	children := childrenOf(pid)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL %d: %v", pid, err)
	}
	for _, c := range children {
		_ = syscall.Kill(c, syscall.SIGKILL)
	}
	for _, p := range append(children, pid) { // wait until they are gone (or zombies)
		for i := 0; i < 100; i++ {
			st, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
			if err != nil || strings.Contains(string(st), ") Z ") {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// childrenOf lists the processes whose parent is pid (Linux /proc).
func childrenOf(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may contain spaces and ')'
		rest := string(st[strings.LastIndexByte(string(st), ')')+1:])
		f := strings.Fields(rest)
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, c)
		}
	}
	return out
}

// TestFencingStaleWrite is the failure fencing exists for, end to end: a
// Session holder pauses (it ignores its context, as a process stopped by a
// GC pause or a frozen VM would), its lock connection dies, a second replica
// takes the lock and writes with its token, and the paused holder wakes and
// writes with its older token: the write is refused (ErrStaleToken, joined
// with the Session's ErrLockLost) and the second replica's value stays.
func TestFencingStaleWrite(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		rA, rB := openRunner(t, a, k), openRunner(t, a, k)
		tbl := ormlock.WithLedgerTable(ledgerTable(t, k, rA))
		table := testdb.Table(t, k, "stale")
		admin := testdb.AdminDB(t, k)
		for _, q := range []string{
			"CREATE TABLE " + table + " (id int PRIMARY KEY, v varchar(32) NOT NULL, fence bigint NOT NULL)",
			"INSERT INTO " + table + " (id, v, fence) VALUES (1, 'initial', 0)",
		} {
			if _, err := admin.Exec(q); err != nil {
				t.Fatal(err)
			}
		}
		key := "fence-stale-" + string(k)
		started, wake := make(chan int64, 1), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- rA.Session(ctx, key, func(ctx context.Context) error {
				tok, _ := ormlock.FencingToken(ctx)
				started <- tok
				<-wake // paused: does not watch ctx
				q := "UPDATE " + table + " SET v = ?, fence = ? WHERE id = 1 AND fence <= ?"
				if k.Dialect() == "postgres" {
					q = "UPDATE " + table + " SET v = $1, fence = $2 WHERE id = 1 AND fence <= $3"
				}
				return ormlock.CheckFenced(rA.Pool().ExecContext(context.Background(), q, "A", tok, tok))
			}, tbl, ormlock.WithFencing(), ormlock.WithKeepalive(200*time.Millisecond))
		}()
		tokA := <-started
		pid, err := lockHolder(ctx, rA, key)
		if err != nil {
			t.Fatal(err)
		}
		testdb.Kill(t, k, pid)
		var tokB int64
		err = rB.Transaction(ctx, key, func(tx txn) error {
			tokB, _ = tx.FencingToken()
			return fencedWrite(k, tx, table, 1, "B", tokB)
		}, tbl, ormlock.WithFencing(), ormlock.WithWait(10*time.Second))
		if err != nil {
			t.Fatalf("second holder: %v", err)
		}
		if tokB <= tokA {
			t.Fatalf("second holder's token %d <= first's %d", tokB, tokA)
		}
		close(wake)
		err = <-done
		if !errors.Is(err, ormlock.ErrStaleToken) || !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("paused holder's Session: %v; want ErrStaleToken and ErrLockLost", err)
		}
		var v string
		if err := admin.QueryRow("SELECT v FROM " + table + " WHERE id = 1").Scan(&v); err != nil || v != "B" {
			t.Fatalf("row v %q (%v), want B", v, err)
		}
	})
}
