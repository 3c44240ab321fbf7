package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/enttest"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/testdb"
)

// pgLockPID returns the pid of the backend that holds the advisory lock of
// k (in no namespace) on the server of kind k, through the admin pool.
func pgLockPID(t *testing.T, kind testdb.Kind, k ormlock.Key) int64 {
	t.Helper()
	pk := keys.Postgres(keys.Key(k), "")
	classid, objid, sub := uint32(uint64(pk.Int64)>>32), uint32(pk.Int64), 1
	if pk.IsPair {
		classid, objid, sub = uint32(pk.ClassID), uint32(pk.ObjID), 2
	}
	var pid int64
	err := testdb.AdminDB(t, kind).QueryRow(`SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND classid::int8 = $1 AND objid::int8 = $2 AND objsubid = $3`, int64(classid), int64(objid), sub).Scan(&pid)
	if err != nil {
		t.Fatalf("find the backend holding %s: %v", k, err)
	}
	return pid
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
	dsn := testdb.DSN(t, k)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	db, err := sql.Open(k.Driver(), dsn+sep+params)
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
