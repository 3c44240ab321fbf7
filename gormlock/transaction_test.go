package gormlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	"gorm.io/gorm/utils/tests"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
)

func TestTransactionHeldElsewhere(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := openGorm(t, k)
		key := "held-" + t.Name()
		release := rawHold(t, k, key)
		called := false
		start := time.Now()
		err := gormlock.Transaction(db, key, func(*gorm.DB) error { called = true; return nil })
		if !errors.Is(err, ormlock.ErrNotAcquired) || called {
			t.Fatalf("err=%v called=%v, want ErrNotAcquired and fn not called", err, called)
		}
		t.Logf("try-once loser returned in %v", time.Since(start))

		// wait timeout
		err = gormlock.Transaction(db, key, func(*gorm.DB) error { called = true; return nil }, ormlock.WithWait(300*time.Millisecond))
		if !errors.Is(err, ormlock.ErrNotAcquired) || called {
			t.Fatalf("wait: err=%v called=%v, want ErrNotAcquired", err, called)
		}

		// a wait that outlasts the holder succeeds
		go func() { time.Sleep(200 * time.Millisecond); release() }()
		err = gormlock.Transaction(db, key, func(*gorm.DB) error { called = true; return nil }, ormlock.WithWait(20*time.Second))
		if err != nil || !called {
			t.Fatalf("wait for release: err=%v called=%v", err, called)
		}
	})
}

func TestTransactionWaitRestoresLockTimeout(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			db, _ := openGorm(t, k)
			var lt string
			err := gormlock.Transaction(db, "lt-"+t.Name(), func(tx *gorm.DB) error {
				return tx.Raw("SELECT current_setting('lock_timeout')").Scan(&lt).Error
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
		db, _ := openGorm(t, k)
		key := "ctx-" + t.Name()
		rawHold(t, k, key)

		t.Run("cancel", func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(200*time.Millisecond, cancel)
			err := gormlock.Transaction(db.WithContext(ctx), key, func(*gorm.DB) error {
				t.Error("fn called")
				return nil
			}, ormlock.WithWait(30*time.Second))
			if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want ErrNotAcquired and context.Canceled", err)
			}
		})
		t.Run("deadline", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			err := gormlock.Transaction(db.WithContext(ctx), key, func(*gorm.DB) error {
				t.Error("fn called")
				return nil
			}, ormlock.WithWait(30*time.Second))
			if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v, want ErrNotAcquired and context.DeadlineExceeded", err)
			}
		})
		t.Run("already cancelled", func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			err := gormlock.Transaction(db.WithContext(ctx), key+"-free", func(*gorm.DB) error {
				t.Error("fn called")
				return nil
			})
			if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want ErrNotAcquired and context.Canceled", err)
			}
		})
		t.Run("cancel inside fn", func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			err := gormlock.Transaction(db.WithContext(ctx), key+"-fn", func(tx *gorm.DB) error {
				cancel()
				return tx.Exec("SELECT 1").Error
			})
			if err == nil {
				t.Fatal("want an error after the context was cancelled inside fn")
			}
			if !rawFree(t, k, key+"-fn") {
				t.Fatal("lock held after cancelled fn")
			}
		})
	})
}

func TestTransactionNested(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := openGorm(t, k)
		key := "nested-" + t.Name()
		if k.Dialect() == "mysql" {
			called := false
			err := db.Transaction(func(outer *gorm.DB) error {
				return gormlock.Transaction(outer, key, func(*gorm.DB) error { called = true; return nil })
			})
			if !errors.Is(err, gormlock.ErrNestedTransaction) || called {
				t.Fatalf("err=%v called=%v, want ErrNestedTransaction and fn not called", err, called)
			}
			return
		}
		tbl := table(t, k, db)
		err := db.Transaction(func(outer *gorm.DB) error {
			if err := gormlock.Transaction(outer, key, func(tx *gorm.DB) error {
				return tx.Exec("INSERT INTO " + tbl + " (id) VALUES (1)").Error
			}); err != nil {
				return err
			}
			if rawFree(t, k, key) {
				return errors.New("nested lock released before the outer transaction ended")
			}
			// a failing nested call rolls back its savepoint, dropping its
			// lock and its work, while the outer transaction goes on
			boom := errors.New("boom")
			if err := gormlock.Transaction(outer, key+"-2", func(tx *gorm.DB) error {
				tx.Exec("INSERT INTO " + tbl + " (id) VALUES (2)")
				return boom
			}); err != boom {
				return fmt.Errorf("nested error = %v, want boom", err)
			}
			if !rawFree(t, k, key+"-2") {
				return errors.New("failed nested call kept its lock")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n := count(t, db, tbl); n != 1 {
			t.Fatalf("rows = %d, want 1 (first nested committed, second rolled back)", n)
		}
		if !rawFree(t, k, key) {
			t.Fatal("lock held after outer commit")
		}
	})
}

func TestTransactionInterop(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := openGorm(t, k)
		for _, key := range []string{"interop-" + t.Name(), `it's "quoted"; DROP TABLE x; --`, "Zürich-日本-🔒"} {
			release := rawHold(t, k, key)
			if err := gormlock.Transaction(db, key, func(*gorm.DB) error { return nil }); !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Fatalf("%q: raw holder did not exclude gormlock: %v", key, err)
			}
			release()
			err := gormlock.Transaction(db, key, func(*gorm.DB) error {
				if rawFree(t, k, key) {
					return errors.New("gormlock holder did not exclude raw SQL")
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
			db, _ := openGorm(t, k)
			admin := testdb.AdminDB(t, k)
			id := keyhash.Int64("numeric-" + t.Name())
			err := gormlock.Transaction(db, id, func(*gorm.DB) error {
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
			err = gormlock.Transaction(db, ormlock.Pair(7, 9), func(*gorm.DB) error {
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

func TestTransactionBadInput(t *testing.T) {
	db, _ := openGorm(t, testdb.Postgres)
	called := false
	fn := func(*gorm.DB) error { called = true; return nil }
	if err := gormlock.Transaction(db, "", fn); !errors.Is(err, ormlock.ErrInvalidKey) {
		t.Errorf("empty key: %v", err)
	}
	if err := gormlock.Transaction(db, ormlock.Key{}, fn); !errors.Is(err, ormlock.ErrInvalidKey) {
		t.Errorf("zero Key: %v", err)
	}
	if err := gormlock.Transaction(db, "bad\xffutf8", fn); !errors.Is(err, ormlock.ErrInvalidKey) {
		t.Errorf("invalid UTF-8: %v", err)
	}
	if err := gormlock.Transaction(db, "nul\x00byte", fn); !errors.Is(err, ormlock.ErrInvalidKey) {
		t.Errorf("NUL: %v", err)
	}
	if err := gormlock.Transaction(nil, "k", fn); !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "nil *gorm.DB") {
		t.Errorf("nil db: %v", err)
	}
	if err := gormlock.Transaction(db, "k", nil); !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "nil fn") {
		t.Errorf("nil fn: %v", err)
	}
	if err := gormlock.Transaction(db, "k", fn, ormlock.WithWait(-time.Second)); !errors.Is(err, ormlock.ErrInvalidArgument) {
		t.Errorf("negative wait: %v", err)
	}
	if err := gormlock.Transaction(db, "k", fn, ormlock.WithNamespace("a:b")); !errors.Is(err, ormlock.ErrInvalidKey) {
		t.Errorf("namespace with colon: %v", err)
	}
	if called {
		t.Error("fn called on bad input")
	}
}

func TestTransactionLongNamesMariaDB(t *testing.T) {
	k := testdb.MariaDB
	db1, _ := openGorm(t, k)
	db2, _ := openGorm(t, k)
	a := strings.Repeat("a", 300)
	b := strings.Repeat("a", 299) + "b"
	if keyhash.MySQLName("", a) == keyhash.MySQLName("", b) {
		t.Fatal("distinct long names map to one MySQL name")
	}
	err := gormlock.Transaction(db1, a, func(*gorm.DB) error {
		if err := gormlock.Transaction(db2, a, func(*gorm.DB) error { return nil }); !errors.Is(err, ormlock.ErrNotAcquired) {
			return fmt.Errorf("same long name not excluded: %v", err)
		}
		return gormlock.Transaction(db2, b, func(*gorm.DB) error { return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestPlugin(t *testing.T) {
	t.Run("unsupported dialect", func(t *testing.T) {
		db, err := gorm.Open(tests.DummyDialector{}, &gorm.Config{Logger: logger.Discard})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Use(gormlock.New()); !errors.Is(err, ormlock.ErrUnsupportedDialect) {
			t.Fatalf("Use on dummy dialect: %v", err)
		}
		if err := gormlock.Transaction(db, "k", func(*gorm.DB) error { return nil }); !errors.Is(err, ormlock.ErrUnsupportedDialect) {
			t.Fatalf("Transaction on dummy dialect: %v", err)
		}
	})
	t.Run("invalid option", func(t *testing.T) {
		db, _ := openGorm(t, testdb.Postgres)
		if err := db.Use(gormlock.New(ormlock.WithLedgerTable("runs; DROP"))); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Fatalf("Use with bad table: %v", err)
		}
	})
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := openGorm(t, k)
		if err := db.Use(gormlock.New(ormlock.WithNamespace("billing"), ormlock.WithWait(5*time.Second))); err != nil {
			t.Fatal(err)
		}
		name := "plugin-" + t.Name()
		err := gormlock.Transaction(db, name, func(*gorm.DB) error {
			// the plugin's namespace applies: the plain name is free, the
			// namespaced key is held
			if !rawFree(t, k, name) {
				return errors.New("plain name held: namespace not applied")
			}
			if rawFreeNS(t, k, "billing", name) {
				return errors.New("namespaced key is free")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// per-call options override the plugin's
		err = gormlock.Transaction(db, name, func(*gorm.DB) error {
			if rawFree(t, k, name) {
				return errors.New("per-call empty namespace not applied")
			}
			return nil
		}, ormlock.WithNamespace(""))
		if err != nil {
			t.Fatal(err)
		}
	})
}

func TestTransactionPrepareStmt(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
		t.Run(string(k), func(t *testing.T) {
			db, _ := openGorm(t, k, &gorm.Config{PrepareStmt: true})
			tbl := table(t, k, db)
			key := "prep-" + t.Name()
			for i := range 3 {
				err := gormlock.Transaction(db, key, func(tx *gorm.DB) error {
					if rawFree(t, k, key) {
						return errors.New("lock not held")
					}
					return tx.Exec("INSERT INTO "+tbl+" (id) VALUES (?)", i).Error
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			if n := count(t, db, tbl); n != 3 {
				t.Fatalf("rows = %d", n)
			}
		})
	}
}

// keep sql imported for helpers used by other files
var _ = sql.ErrNoRows
