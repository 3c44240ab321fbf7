package entlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"entgo.io/ent/dialect"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/enttest"
	"github.com/ormlock/ormlock/internal/enttest/ent"
	"github.com/ormlock/ormlock/internal/enttest/ent/item"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
)

func TestTransactionHeldElsewhere(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		client, _ := openEnt(t, k)
		key := "held-" + t.Name()
		release := rawHold(t, k, key)
		called := false
		fn := func(*ent.Tx) error { called = true; return nil }
		start := time.Now()
		err := entlock.Transaction(ctx, client, key, fn)
		if !errors.Is(err, ormlock.ErrNotAcquired) || called {
			t.Fatalf("err=%v called=%v, want ErrNotAcquired and fn not called", err, called)
		}
		if !errors.Is(err, entlock.ErrNotAcquired) {
			t.Fatal("re-exported sentinel does not match")
		}
		t.Logf("try-once loser returned in %v: %v", time.Since(start), err)

		// wait timeout
		start = time.Now()
		err = entlock.Transaction(ctx, client, key, fn, ormlock.WithWait(300*time.Millisecond))
		if !errors.Is(err, ormlock.ErrNotAcquired) || called {
			t.Fatalf("wait: err=%v called=%v, want ErrNotAcquired", err, called)
		}
		t.Logf("300ms wait gave up after %v", time.Since(start))

		// a wait that outlasts the holder succeeds
		time.AfterFunc(200*time.Millisecond, release)
		err = entlock.Transaction(ctx, client, key, fn, ormlock.WithWait(20*time.Second))
		if err != nil || !called {
			t.Fatalf("wait for release: err=%v called=%v", err, called)
		}
	})
}

func TestTransactionWaitRestoresLockTimeout(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			ctx := context.Background()
			client, _ := openEnt(t, k)
			var lt string
			err := entlock.Transaction(ctx, client, "lt-"+t.Name(), func(tx *ent.Tx) error {
				rows, err := tx.QueryContext(ctx, "SELECT current_setting('lock_timeout')")
				if err != nil {
					return err
				}
				defer rows.Close()
				for rows.Next() {
					if err := rows.Scan(&lt); err != nil {
						return err
					}
				}
				return rows.Err()
			}, ormlock.WithWait(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if lt != "0" {
				t.Fatalf("lock_timeout inside fn = %q, want the session's own value 0", lt)
			}
		})
	}
}

func TestTransactionContext(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		client, _ := openEnt(t, k)
		key := "ctx-" + t.Name()
		rawHold(t, k, key)
		notCalled := func(*ent.Tx) error {
			t.Error("fn called")
			return nil
		}

		t.Run("cancel", func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(200*time.Millisecond, cancel)
			err := entlock.Transaction(ctx, client, key, notCalled, ormlock.WithWait(30*time.Second))
			if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want ErrNotAcquired and context.Canceled", err)
			}
		})
		t.Run("deadline", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			err := entlock.Transaction(ctx, client, key, notCalled, ormlock.WithWait(30*time.Second))
			if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v, want ErrNotAcquired and context.DeadlineExceeded", err)
			}
		})
		t.Run("already cancelled", func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			err := entlock.Transaction(ctx, client, key+"-free", notCalled)
			if !errors.Is(err, context.Canceled) || !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Fatalf("err = %v, want context.Canceled and ErrNotAcquired", err)
			}
		})
		t.Run("cancel inside fn", func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			err := entlock.Transaction(ctx, client, key+"-fn", func(tx *ent.Tx) error {
				cancel()
				_, err := tx.Item.Query().Count(ctx)
				return err
			})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want fn's context.Canceled", err)
			}
			if !rawFree(t, k, key+"-fn") {
				t.Fatal("lock held after cancelled fn")
			}
		})
		t.Run("cancel inside fn, fn returns nil", func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			owner := enttest.Owner(t, k)
			err := entlock.Transaction(ctx, client, key+"-fn2", func(tx *ent.Tx) error {
				if err := insert(ctx, tx, owner, 1); err != nil {
					return err
				}
				cancel()
				// the lock is held until fn returns, even after ctx ended
				time.Sleep(50 * time.Millisecond)
				if rawFree(t, k, key+"-fn2") {
					return errors.New("lock dropped when ctx ended, before fn returned")
				}
				return nil
			})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want a commit error matching context.Canceled", err)
			}
			if n := count(t, k, owner); n != 0 {
				t.Fatalf("%d rows committed after ctx ended, want 0", n)
			}
			if !rawFree(t, k, key+"-fn2") {
				t.Fatal("lock held after cancelled fn")
			}
		})
	})
}

func TestTransactionNested(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		client, _ := openEnt(t, k)
		owner := enttest.Owner(t, k)
		key := "nested-" + t.Name()
		boom := errors.New("boom")
		err := entlock.Transaction(ctx, client, key, func(tx *ent.Tx) error {
			if err := insert(ctx, tx, owner, 1); err != nil {
				return err
			}
			// the transactional client cannot start a transaction
			called := false
			err := entlock.Transaction(ctx, tx.Client(), key+"-inner", func(*ent.Tx) error { called = true; return nil })
			if err == nil || called || !strings.Contains(err.Error(), "within a transaction") {
				return fmt.Errorf("tx.Client(): err=%v called=%v, want ent's error and fn not called", err, called)
			}
			// the same key on the plain client is another connection: not re-entrant
			err = entlock.Transaction(ctx, client, key, func(*ent.Tx) error { called = true; return nil })
			if !errors.Is(err, ormlock.ErrNotAcquired) || called {
				return fmt.Errorf("same key: err=%v called=%v, want ErrNotAcquired", err, called)
			}
			start := time.Now()
			err = entlock.Transaction(ctx, client, key, func(*ent.Tx) error { called = true; return nil }, ormlock.WithWait(300*time.Millisecond))
			if !errors.Is(err, ormlock.ErrNotAcquired) || called {
				return fmt.Errorf("same key with wait: err=%v called=%v, want ErrNotAcquired", err, called)
			}
			t.Logf("nested same-key wait gave up after %v", time.Since(start))
			// another key: an independent transaction that commits on its own
			if err := entlock.Transaction(ctx, client, key+"-other", func(inner *ent.Tx) error {
				return insert(ctx, inner, owner, 2)
			}); err != nil {
				return fmt.Errorf("other key: %w", err)
			}
			return boom
		})
		if err != boom {
			t.Fatalf("outer err = %v, want boom", err)
		}
		n, err := client.Item.Query().Where(item.Owner(owner)).Only(ctx)
		if err != nil || n.N != 2 {
			t.Fatalf("rows: %v %v, want only the inner transaction's row (n=2)", n, err)
		}
	})
}

func TestTransactionPoolExhausted(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		client, db := openEnt(t, k)
		db.SetMaxOpenConns(1)
		key := "pool-" + t.Name()
		err := entlock.Transaction(ctx, client, key, func(*ent.Tx) error {
			ictx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			err := entlock.Transaction(ictx, client, key+"-inner", func(*ent.Tx) error { return errors.New("inner fn called") })
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

func TestTransactionInterop(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		client, _ := openEnt(t, k)
		for _, key := range []string{"interop-" + t.Name(), `it's "quoted"; DROP TABLE x; --`, "Zürich-日本-🔒"} {
			release := rawHold(t, k, key)
			if err := entlock.Transaction(ctx, client, key, func(*ent.Tx) error { return nil }); !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Fatalf("%q: raw holder did not exclude entlock: %v", key, err)
			}
			release()
			err := entlock.Transaction(ctx, client, key, func(*ent.Tx) error {
				if rawFree(t, k, key) {
					return errors.New("entlock holder did not exclude raw SQL")
				}
				return nil
			})
			if err != nil {
				t.Fatalf("%q: %v", key, err)
			}
		}
	})
}

func TestTransactionNumericKeys(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			ctx := context.Background()
			client, _ := openEnt(t, k)
			admin := testdb.AdminDB(t, k)
			id := keyhash.Int64("numeric-" + t.Name())
			err := entlock.Transaction(ctx, client, id, func(*ent.Tx) error {
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
			err = entlock.Transaction(ctx, client, ormlock.Pair(7, 9), func(*ent.Tx) error {
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
}

// The lock is released only after COMMIT: whoever takes it next sees the
// holder's writes (on MySQL/MariaDB RELEASE_LOCK runs after COMMIT).
func TestTransactionReleaseAfterCommit(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		holder, _ := openEnt(t, k)
		waiter, _ := openEnt(t, k)
		owner := enttest.Owner(t, k)
		key := "relcommit-" + t.Name()
		for i := range 20 {
			inserted := make(chan struct{})
			var seen int
			var werr error
			var wg sync.WaitGroup
			wg.Go(func() {
				<-inserted
				werr = entlock.Transaction(ctx, waiter, key, func(tx *ent.Tx) error {
					var err error
					seen, err = tx.Item.Query().Where(item.Owner(owner)).Count(ctx)
					return err
				}, ormlock.WithWait(20*time.Second))
			})
			err := entlock.Transaction(ctx, holder, key, func(tx *ent.Tx) error {
				if err := insert(ctx, tx, owner, i); err != nil {
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
			if seen != i+1 {
				t.Fatalf("round %d: the next holder saw %d rows, want %d: the lock was released before COMMIT", i, seen, i+1)
			}
		}
	})
}

func TestTransactionBadInput(t *testing.T) {
	ctx := context.Background()
	var nilCtx context.Context
	client, _ := openEnt(t, testdb.Postgres)
	called := false
	fn := func(*ent.Tx) error { called = true; return nil }
	for _, c := range []struct {
		name string
		err  error
		want error
		text string
	}{
		{"empty key", entlock.Transaction(ctx, client, "", fn), ormlock.ErrInvalidKey, "empty"},
		{"zero Key", entlock.Transaction(ctx, client, ormlock.Key{}, fn), ormlock.ErrInvalidKey, "zero Key"},
		{"invalid UTF-8", entlock.Transaction(ctx, client, "bad\xffutf8", fn), ormlock.ErrInvalidKey, "UTF-8"},
		{"NUL", entlock.Transaction(ctx, client, "nul\x00byte", fn), ormlock.ErrInvalidKey, "NUL"},
		{"nil ctx", entlock.Transaction(nilCtx, client, "k", fn), ormlock.ErrInvalidArgument, "nil context"},
		{"nil client", entlock.Transaction(ctx, (*ent.Client)(nil), "k", fn), ormlock.ErrInvalidArgument, "nil client"},
		{"nil fn", entlock.Transaction(ctx, client, "k", (func(*ent.Tx) error)(nil)), ormlock.ErrInvalidArgument, "nil fn"},
		{"negative wait", entlock.Transaction(ctx, client, "k", fn, ormlock.WithWait(-time.Second)), ormlock.ErrInvalidArgument, "WithWait"},
		{"namespace with colon", entlock.Transaction(ctx, client, "k", fn, ormlock.WithNamespace("a:b")), ormlock.ErrInvalidKey, "namespace"},
		{"Session nil fn", entlock.Session(ctx, client, "k", nil), ormlock.ErrInvalidArgument, "nil fn"},
		{"Session empty key", entlock.Session(ctx, client, "", func(context.Context) error { called = true; return nil }), ormlock.ErrInvalidKey, "empty"},
	} {
		if !errors.Is(c.err, c.want) || !strings.Contains(c.err.Error(), c.text) || !strings.HasPrefix(c.err.Error(), "ormlock: ") {
			t.Errorf("%s: err = %v, want %v mentioning %q", c.name, c.err, c.want, c.text)
		}
	}
	if called {
		t.Error("fn called on bad input")
	}
}

func TestTransactionLongNamesMariaDB(t *testing.T) {
	k := testdb.MariaDB
	ctx := context.Background()
	c1, _ := openEnt(t, k)
	c2, _ := openEnt(t, k)
	a := strings.Repeat("a", 300)
	b := strings.Repeat("a", 299) + "b"
	if keyhash.MySQLName("", a) == keyhash.MySQLName("", b) {
		t.Fatal("distinct long names map to one MySQL name")
	}
	err := entlock.Transaction(ctx, c1, a, func(*ent.Tx) error {
		if err := entlock.Transaction(ctx, c2, a, func(*ent.Tx) error { return nil }); !errors.Is(err, ormlock.ErrNotAcquired) {
			return fmt.Errorf("same long name not excluded: %v", err)
		}
		return entlock.Transaction(ctx, c2, b, func(*ent.Tx) error { return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
}

// noDB is a driver that does not expose its *sql.DB.
type noDB struct{ dialect.Driver }

func TestTransactionTxOptions(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		client, _ := openEnt(t, k)
		owner := enttest.Owner(t, k)
		key := "txopts-" + t.Name()
		err := entlock.Transaction(ctx, client, key, func(tx *ent.Tx) error {
			if rawFree(t, k, key) {
				return errors.New("lock not held")
			}
			return insert(ctx, tx, owner, 1)
		}, ormlock.WithTxOptions(&sql.TxOptions{ReadOnly: true}))
		if err == nil {
			t.Fatal("insert in a read-only transaction succeeded: WithTxOptions not applied")
		}
		t.Logf("read-only transaction refused the insert: %v", err)
		if n := count(t, k, owner); n != 0 {
			t.Fatalf("rows = %d", n)
		}
		if !rawFree(t, k, key) {
			t.Fatal("lock held after the failed transaction")
		}
	})
}
