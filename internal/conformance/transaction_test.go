package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/stmtlog"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
	"github.com/ormlock/ormlock/keyhash"
)

// Transaction's edge cases on every adapter and server. Waiting, giving up
// and a context ending while waiting are TestConformanceWaitAndCancel;
// exclusion of and by hand-written SQL is TestCrossORMInterop.

// ofOwner is the condition on items of owner, as SQL.
func ofOwner(owner string) string {
	return "owner = '" + strings.ReplaceAll(owner, "'", "''") + "'"
}

func TestTransactionWaitRestoresLockTimeout(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, a adapter, k testdb.Kind) {
		l := a.open(t, k)
		var lt string
		err := l.Transaction(context.Background(), "lt-"+t.Name(), func(tx txn) error {
			return tx.Scan("SELECT current_setting('lock_timeout')", &lt)
		}, ormlock.WithWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if lt != "0" {
			t.Fatalf("lock_timeout inside fn = %q, want the session's own value 0", lt)
		}
	})
}

func TestTransactionContext(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		l := a.open(t, k)
		key := "ctx-" + t.Name()
		t.Run("already cancelled", func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			err := l.Transaction(ctx, key+"-free", func(txn) error {
				t.Error("fn called")
				return nil
			})
			if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want ErrNotAcquired and context.Canceled", err)
			}
		})
		t.Run("cancel inside fn", func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			err := l.Transaction(ctx, key+"-fn", func(tx txn) error {
				cancel()
				_, err := queryInt(tx, "SELECT 1")
				return err
			})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want fn's context.Canceled", err)
			}
			if !free(t, k, key+"-fn") {
				t.Fatal("lock held after cancelled fn")
			}
		})
		t.Run("cancel inside fn, fn returns nil", func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			owner := enttest.Owner(t, k)
			err := l.Transaction(ctx, key+"-fn2", func(tx txn) error {
				if err := tx.Insert(owner, 1); err != nil {
					return err
				}
				cancel()
				// the lock is held until fn returns, even after ctx ended
				time.Sleep(50 * time.Millisecond)
				if free(t, k, key+"-fn2") {
					return errors.New("lock dropped when ctx ended, before fn returned")
				}
				return nil
			})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want a commit error matching context.Canceled", err)
			}
			if n := enttest.Count(t, k, owner); n != 0 {
				t.Fatalf("%d rows committed after ctx ended, want 0", n)
			}
			if !free(t, k, key+"-fn2") {
				t.Fatal("lock held after cancelled fn")
			}
		})
	})
}

// A call inside fn on the same pool, whose one connection fn's transaction
// holds, gives up at its deadline.
func TestTransactionPoolExhausted(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r := openRunner(t, a, k)
		r.Pool().SetMaxOpenConns(1)
		key := "pool-" + t.Name()
		err := r.Transaction(ctx, key, func(txn) error {
			ictx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			err := r.Transaction(ictx, key+"-inner", func(txn) error { return errors.New("inner fn called") })
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ormlock.ErrNotAcquired) {
				return fmt.Errorf("inner on an exhausted pool: %v, want ErrNotAcquired and DeadlineExceeded", err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

func TestTransactionNumericKeys(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		l := a.open(t, k)
		admin := testdb.AdminDB(t, k)
		id := keyhash.Int64("numeric-" + t.Name())
		err := l.Transaction(ctx, id, func(txn) error {
			var ok bool
			if err := admin.QueryRow("SELECT pg_try_advisory_xact_lock($1)", id).Scan(&ok); err != nil || ok {
				return fmt.Errorf("bigint id not held: ok=%v err=%v", ok, err)
			}
			// the pair space is separate
			return admin.QueryRow("SELECT pg_try_advisory_xact_lock(1, 2)").Scan(&ok)
		})
		if err != nil {
			t.Fatal(err)
		}
		err = l.Transaction(ctx, ormlock.Pair(7, 9), func(txn) error {
			var ok bool
			if err := admin.QueryRow("SELECT pg_try_advisory_xact_lock(7, 9)").Scan(&ok); err != nil || ok {
				return fmt.Errorf("pair not held: ok=%v err=%v", ok, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// The lock is released only after COMMIT: whoever takes it next sees the
// holder's writes (on MySQL/MariaDB RELEASE_LOCK runs after COMMIT).
func TestTransactionReleaseAfterCommit(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		holder, waiter := a.open(t, k), a.open(t, k)
		owner := enttest.Owner(t, k)
		key := "relcommit-" + t.Name()
		for i := range 20 {
			inserted := make(chan struct{})
			var seen int64
			var werr error
			var wg sync.WaitGroup
			wg.Go(func() {
				<-inserted
				werr = waiter.Transaction(ctx, key, func(tx txn) error {
					var err error
					seen, err = queryInt(tx, "SELECT COUNT(*) FROM items WHERE "+ofOwner(owner))
					return err
				}, ormlock.WithWait(20*time.Second))
			})
			err := holder.Transaction(ctx, key, func(tx txn) error {
				if err := tx.Insert(owner, i); err != nil {
					return err
				}
				close(inserted)
				time.Sleep(20 * time.Millisecond) // the waiter is now waiting
				return nil
			})
			wg.Wait()
			if err != nil || werr != nil {
				t.Fatalf("round %d: holder %v, waiter %v", i, err, werr)
			}
			if seen != int64(i+1) {
				t.Fatalf("round %d: the next holder saw %d rows, want %d: the lock was released before COMMIT", i, seen, i+1)
			}
		}
	})
}

// WithTxOptions applies to fn's transaction: a read-only one refuses the
// insert, and the lock is free after the failure.
func TestTransactionTxOptions(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		l := a.open(t, k)
		owner := enttest.Owner(t, k)
		key := "txopts-" + t.Name()
		err := l.Transaction(context.Background(), key, func(tx txn) error {
			if free(t, k, key) {
				return errors.New("lock not held")
			}
			return tx.Insert(owner, 1)
		}, ormlock.WithTxOptions(&sql.TxOptions{ReadOnly: true}))
		if err == nil {
			t.Fatal("insert in a read-only transaction succeeded: WithTxOptions not applied")
		}
		t.Logf("read-only transaction refused the insert: %v", err)
		settled(t, k, owner, key, 0, "the failed transaction")
	})
}

// Bad input, the same on every adapter, fails before any lock with a
// sentinel and a message naming the problem; the adapters test their own
// (a nil handle, a nil context).
func TestTransactionBadInput(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			ctx := context.Background()
			l := a.open(t, testdb.Postgres)
			called := false
			fn := func(txn) error { called = true; return nil }
			sfn := func(context.Context) error { called = true; return nil }
			for _, c := range []struct {
				name string
				err  error
				want error
				text string
			}{
				{"empty key", l.Transaction(ctx, "", fn), ormlock.ErrInvalidKey, "empty"},
				{"zero Key", l.Transaction(ctx, ormlock.Key{}, fn), ormlock.ErrInvalidKey, "zero Key"},
				{"invalid UTF-8", l.Transaction(ctx, "bad\xffutf8", fn), ormlock.ErrInvalidKey, "UTF-8"},
				{"NUL", l.Transaction(ctx, "nul\x00byte", fn), ormlock.ErrInvalidKey, "NUL"},
				{"nil fn", l.Transaction(ctx, "k", nil), ormlock.ErrInvalidArgument, "nil fn"},
				{"negative wait", l.Transaction(ctx, "k", fn, ormlock.WithWait(-time.Second)), ormlock.ErrInvalidArgument, "WithWait"},
				{"namespace with colon", l.Transaction(ctx, "k", fn, ormlock.WithNamespace("a:b")), ormlock.ErrInvalidKey, "namespace"},
				{"Session nil fn", l.Session(ctx, "k", nil), ormlock.ErrInvalidArgument, "nil fn"},
				{"Session empty key", l.Session(ctx, "", func(context.Context) error { called = true; return nil }), ormlock.ErrInvalidKey, "empty"},
				{"Session zero Key", l.Session(ctx, ormlock.Key{}, sfn), ormlock.ErrInvalidKey, "zero Key"},
				{"Session zero keepalive", l.Session(ctx, "k", sfn, ormlock.WithKeepalive(0)), ormlock.ErrInvalidArgument, "WithKeepalive"},
				{"Session negative wait", l.Session(ctx, "k", sfn, ormlock.WithWait(-time.Second)), ormlock.ErrInvalidArgument, "WithWait"},
			} {
				if !errors.Is(c.err, c.want) || !strings.Contains(c.err.Error(), c.text) || !strings.HasPrefix(c.err.Error(), "ormlock: ") {
					t.Errorf("%s: err = %v, want %v mentioning %q", c.name, c.err, c.want, c.text)
				}
			}
			if called {
				t.Error("fn called on bad input")
			}
		})
	}
}

func TestTransactionLongNamesMariaDB(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			k := testdb.MariaDB
			ctx := context.Background()
			l1, l2 := a.open(t, k), a.open(t, k)
			long := strings.Repeat("a", 300)
			other := strings.Repeat("a", 299) + "b"
			if keyhash.MySQLName("", long) == keyhash.MySQLName("", other) {
				t.Fatal("distinct long names map to one MySQL name")
			}
			err := l1.Transaction(ctx, long, func(txn) error {
				if err := l2.Transaction(ctx, long, func(txn) error { return nil }); !errors.Is(err, ormlock.ErrNotAcquired) {
					return fmt.Errorf("same long name not excluded: %v", err)
				}
				return l2.Transaction(ctx, other, func(txn) error { return nil })
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestTransactionRoundTrips counts the statements each contender sends, in
// PostgreSQL's own statement log (log_statement = all; one line per
// simple-protocol message or extended-protocol execute), directly and behind
// PgBouncer: a locked Transaction sends what a plain transaction of the ORM
// does (BEGIN with the lock, COMMIT), a loser two (BEGIN with the lock,
// ROLLBACK), Session's set-up one (BEGIN, transaction_timeout off, the lock
// and the idle timeout read together) and its release one, the hand-written
// protocol three. GORM's PrepareStmt fallback is gormlock's own test;
// sqllock's database/sql BEGIN is sqlBeginRoundTrips.
func TestTransactionRoundTrips(t *testing.T) {
	forEachPostgresInTurn(t, func(t *testing.T, a adapter, k testdb.Kind) {
		sl := stmtlog.Start(t, k)
		db := sl.Open(t)
		enttest.Migrate(t, k)
		t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
		r := a.on(t, k.Dialect(), db)
		ctx := context.Background()
		name := "rt-" + t.Name()
		noop := func(txn) error { return nil }
		counts := map[string][]string{
			"Transaction":              sl.Count(t, func() error { return r.Transaction(ctx, name, noop) }),
			"Transaction (wait)":       sl.Count(t, func() error { return r.Transaction(ctx, name, noop, ormlock.WithWait(time.Second)) }),
			"ORM transaction, no lock": sl.Count(t, func() error { return r.PlainTx(ctx) }),
			"Session": sl.Count(t, func() error {
				return r.Session(ctx, name, func(context.Context) error { return nil })
			}),
			"hand-written (BEGIN; lock; COMMIT)": sl.Count(t, func() error { return testdb.Handwritten(ctx, k, db, name) }),
		}
		release := testdb.RawHold(t, k, "", name)
		counts["Transaction, loser"] = sl.Count(t, func() error {
			if err := r.Transaction(ctx, name, noop); !errors.Is(err, ormlock.ErrNotAcquired) {
				return fmt.Errorf("loser: %v", err)
			}
			return nil
		})
		counts["Transaction (wait), loser"] = sl.Count(t, func() error {
			if err := r.Transaction(ctx, name, noop, ormlock.WithWait(20*time.Millisecond)); !errors.Is(err, ormlock.ErrNotAcquired) {
				return fmt.Errorf("waiting loser: %v", err)
			}
			return nil
		})
		counts["hand-written, loser"] = sl.Count(t, func() error { return testdb.Handwritten(ctx, k, db, name) })
		release()
		want := map[string]int{
			"Transaction":                        2,
			"Transaction (wait)":                 2,
			"ORM transaction, no lock":           2,
			"Session":                            2,
			"hand-written (BEGIN; lock; COMMIT)": 3,
			"Transaction, loser":                 2,
			"Transaction (wait), loser":          2,
			"hand-written, loser":                3,
		}
		sqlBeginRoundTrips(a, want)
		for c, lines := range counts {
			t.Logf("%s: %d round trips: %q", c, len(lines), lines)
			if len(lines) != want[c] {
				t.Errorf("%s: %d statements in the server log, want %d: %q", c, len(lines), want[c], lines)
			}
		}
		if first := counts["Transaction"]; a.name != "sqllock" && len(first) > 0 && !(strings.Contains(first[0], "BEGIN") && strings.Contains(first[0], "pg_try_advisory_xact_lock")) {
			t.Errorf("BEGIN and the lock are not one message: %q", first)
		}
	})
}

// When fn fails and the rollback that follows fails too, every adapter
// ends the call alike (lockproto.RunTx) and drops neither error. The
// rollback is made to fail by ending fn's own server connection inside fn,
// which is also the lock's: the rollback then finds the lock lost, so the
// error matches ormlock.ErrLockLost and fn's error, names the ROLLBACK and
// says "ormlock: " once. The server rolls the transaction back and frees
// the lock with the connection, and the pool's leak check (no lock, no
// connection in use) still holds. (A rollback that fails on a connection
// that survives adds its failure after fn's error: errs.RolledBack's
// tests.)
func TestRollbackFailureJoinsFnError(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r, tbl := openWithLedger(t, a, k)
		boom := errors.New("fn failed")
		killOwn := func(tx txn) error {
			if err := killConn(t, k, tx); err != nil {
				return err
			}
			return boom
		}
		check := func(verb string, err error) {
			t.Helper()
			if !errors.Is(err, boom) || !errors.Is(err, ormlock.ErrLockLost) {
				t.Fatalf("%s: %v, want fn's error and ErrLockLost", verb, err)
			}
			if !strings.Contains(err.Error(), "ROLLBACK") || strings.Count(err.Error(), "ormlock: ") > 1 {
				t.Fatalf("%s: %q, want the failed ROLLBACK named, with \"ormlock: \" once", verb, err)
			}
		}
		ctx := context.Background()
		check("Transaction", r.Transaction(ctx, "rollback-fails", killOwn))
		check("RunOnce", r.RunOnce(ctx, "rollback-fails", testdb.Slot(1), killOwn, ormlock.WithLedgerTable(tbl)))
		if rs := runsOf(t, r, tbl, "rollback-fails"); len(rs) != 0 {
			t.Fatalf("runs after a failed RunOnce: %+v, want none", rs)
		}
		// the lock is free again
		if err := r.Transaction(ctx, "rollback-fails", func(txn) error { return nil }); err != nil {
			t.Fatalf("Transaction after the lost connection: %v", err)
		}
	})
}

// TestMySQLImplicitCommit: MySQL/MariaDB commits the open transaction
// before a DDL statement (TRUNCATE included), behind the library's back. A
// fn that writes, truncates and then fails gets an error that names the
// implicit commit and suggests WithClaim, with fn's error reachable; a
// transactional RunOnce records such a run 'failed' (not a 'running' row
// the next trigger would take over), and one whose fn returned nil 'done'.
func TestMySQLImplicitCommit(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			ctx := context.Background()
			r, tbl, scratch := openImplicitCommit(t, a, "staging")
			errFn := errors.New("reload failed")
			job := func(fail bool) func(tx txn) error {
				return func(tx txn) error {
					if err := tx.Insert("implicit-"+a.name, 1); err != nil {
						return err
					}
					if err := tx.Exec("TRUNCATE TABLE " + scratch); err != nil {
						return err
					}
					if fail {
						return errFn
					}
					return nil
				}
			}
			check := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, errFn) {
					t.Errorf("%s: err = %v, want fn's error", what, err)
				}
				if msg := err.Error(); err != nil && (!strings.Contains(msg, "implicit") || !strings.Contains(msg, "WithClaim") || strings.Count(msg, "ormlock: ") != 1) {
					t.Errorf("%s: %q should name the implicit commit, suggest WithClaim and say \"ormlock: \" once", what, msg)
				}
			}
			check("Transaction", r.Transaction(ctx, "implicit-"+a.name, job(true)))
			if err := r.Transaction(ctx, "implicit-"+a.name, job(false)); err != nil {
				t.Errorf("Transaction, fn returned nil: %v", err)
			}

			name := "implicit-job-" + a.name
			check("RunOnce", r.RunOnce(ctx, name, testdb.Slot(0), job(true), ormlock.WithLedgerTable(tbl)))
			if rs := runsOf(t, r, tbl, name); len(rs) != 1 || rs[0].Status != "failed" {
				t.Errorf("RunOnce, fn failed after an implicit commit: ledger %+v, want one 'failed' row", rs)
			}
			if err := r.RunOnce(ctx, name, testdb.Slot(1), job(false), ormlock.WithLedgerTable(tbl)); err != nil {
				t.Errorf("RunOnce, fn returned nil: %v", err)
			}
			if rs := runsOf(t, r, tbl, name); len(rs) != 2 || rs[0].Status != "done" && rs[1].Status != "done" {
				t.Errorf("RunOnce, fn returned nil after an implicit commit: ledger %+v, want a 'done' row", rs)
			}
		})
	}
}

// TestMySQLCompletionType: with completion_type=2 (COMMIT AND RELEASE:
// the server closes the connection after COMMIT) a committed Transaction
// is never reported as failed, and with completion_type=1 (COMMIT AND
// CHAIN: a new transaction begins at once) no connection goes back to the
// pool inside a transaction; with a context that can end and one that
// cannot.
func TestMySQLCompletionType(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			k := testdb.MariaDB
			enttest.Migrate(t, k)
			owner := enttest.Owner(t, k)
			n := 0
			for _, ct := range []string{"1", "2"} {
				db := openWith(t, k, "completion_type="+ct)
				db.SetMaxOpenConns(1) // the next statement runs on the Transaction's connection
				r := a.on(t, k.Dialect(), db)
				name := "completion-" + a.name + "-" + ct
				// one key, and the lock shapes, whose first GET_LOCK reads
				// the setting too
				for i := range 6 {
					key := []any{name, ormlock.All(name+"-a", name+"-b"), ormlock.Semaphore(name+"-sem", 2)}[i/2]
					cancellable := i%2 == 1
					ctx := context.Background()
					if cancellable {
						var cancel context.CancelFunc
						ctx, cancel = context.WithCancel(ctx)
						defer cancel()
					}
					n++
					err := r.Transaction(ctx, key, func(tx txn) error {
						return tx.Insert(owner, n)
					})
					if err != nil {
						t.Errorf("completion_type=%s, cancellable context %v: %v", ct, cancellable, err)
					}
					var rows int
					if err := testdb.AdminDB(t, k).QueryRow("SELECT COUNT(*) FROM items WHERE owner = ? AND n = ?", owner, n).Scan(&rows); err != nil || rows != 1 {
						t.Errorf("completion_type=%s, cancellable context %v: %d rows committed (%v), want 1", ct, cancellable, rows, err)
					}
					var inTx int
					if err := db.QueryRow("SELECT @@in_transaction").Scan(&inTx); err != nil || inTx != 0 {
						t.Errorf("completion_type=%s, cancellable context %v: the pool's connection is in a transaction (%d, %v)", ct, cancellable, inTx, err)
					}
				}
				closeChecked(t, k, db)
			}
		})
	}
}

// TestImplicitCommitSentinel: the error of a fn that MySQL/MariaDB
// committed implicitly (a DDL statement inside fn) and that then failed
// matches the public ormlock.ErrImplicitCommit with errors.Is, besides
// fn's own error, for Transaction and a transactional RunOnce of every
// adapter.
func TestImplicitCommitSentinel(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			ctx := context.Background()
			r, tbl, scratch := openImplicitCommit(t, a, "ddl")
			errFn := errors.New("fn failed after DDL")
			fn := func(tx txn) error {
				if err := tx.Exec("TRUNCATE TABLE " + scratch); err != nil {
					return err
				}
				return errFn
			}
			check := func(verb string, err error) {
				t.Helper()
				if !errors.Is(err, ormlock.ErrImplicitCommit) || !errors.Is(err, errFn) {
					t.Errorf("%s: %v, want errors.Is ormlock.ErrImplicitCommit and fn's error", verb, err)
				}
			}
			check("Transaction", r.Transaction(ctx, "implicit-sentinel-"+a.name, fn))
			check("RunOnce", r.RunOnce(ctx, "implicit-sentinel-job-"+a.name, testdb.Slot(0), fn, ormlock.WithLedgerTable(tbl)))
		})
	}
}

// openImplicitCommit opens a's runner on MariaDB with a ledger table of its
// own and creates the scratch table (id int) whose DDL inside fn commits
// fn's transaction implicitly; it returns the runner, the ledger table and
// the scratch table.
func openImplicitCommit(t *testing.T, a adapter, scratchName string) (runner, string, string) {
	t.Helper()
	k := testdb.MariaDB
	r, tbl := openWithLedger(t, a, k)
	scratch := testdb.Table(t, k, scratchName)
	if _, err := testdb.AdminDB(t, k).Exec("CREATE TABLE " + scratch + " (id int)"); err != nil {
		t.Fatal(err)
	}
	return r, tbl, scratch
}
