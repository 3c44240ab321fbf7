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

// connID returns the server connection id of q: pg_backend_pid() or
// CONNECTION_ID().
func connID(t *testing.T, k testdb.Kind, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}) int64 {
	t.Helper()
	query := "SELECT CONNECTION_ID()"
	if k.Dialect() == "postgres" {
		query = "SELECT pg_backend_pid()"
	}
	var id int64
	if err := q.QueryRowContext(context.Background(), query).Scan(&id); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return id
}

func holderOf[K ormlock.KeyType](t *testing.T, db *gorm.DB, key K, opts ...ormlock.Option) ormlock.HolderInfo {
	t.Helper()
	h, err := gormlock.Holder(db, key, opts...)
	if err != nil {
		t.Fatalf("Holder(%v): %v", key, err)
	}
	if h.Dialect == "" || h.Lock == "" {
		t.Errorf("Holder(%v) without Dialect/Lock: %+v", key, h)
	}
	return h
}

func TestHolderFree(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := openGorm(t, k)
		for _, key := range []ormlock.Key{ormlock.Name("holder-free-" + t.Name()), ormlock.ID(keyhash.Int64("holder-free-id-" + t.Name())), ormlock.Pair(-3, 77)} {
			h := holderOf(t, db, key)
			if h.Held || h.PID != 0 || h.User != "" || h.Waiters != 0 || !h.TxStart.IsZero() || h.String() != "free" {
				t.Errorf("%v: free lock reported as %+v", key, h)
			}
			if h.Dialect != k.Dialect() {
				t.Errorf("dialect %q", h.Dialect)
			}
		}
	})
}

func TestHolderTransaction(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := openGorm(t, k)
		key := "holder-tx-" + t.Name()
		var h ormlock.HolderInfo
		var pid int64
		err := gormlock.Transaction(db, key, func(tx *gorm.DB) error {
			if err := tx.Raw(map[bool]string{true: "SELECT pg_backend_pid()", false: "SELECT CONNECTION_ID()"}[k.Dialect() == "postgres"]).Scan(&pid).Error; err != nil {
				return err
			}
			time.Sleep(10 * time.Millisecond)
			var err error
			h, err = gormlock.Holder(db, key) // through the pool, another connection
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("holder seen from another connection: %s (lock %s)", h, h.Lock)
		if !h.Held || h.PID != pid {
			t.Fatalf("Holder = %+v, want held by the transaction's connection %d", h, pid)
		}
		if h.User == "" || h.ClientAddr == "" || h.Database == "" || h.State == "" {
			t.Errorf("holder details missing: %+v", h)
		}
		if k.Dialect() == "postgres" {
			if h.State != "idle in transaction" || h.TxStart.IsZero() || h.ConnStart.IsZero() || h.Mode != "ExclusiveLock" {
				t.Errorf("postgres details: %+v", h)
			}
			if !strings.Contains(h.Query, "pg_backend_pid") {
				t.Errorf("query = %q, want the holder's last statement", h.Query)
			}
			// HeldFor runs from the transaction's start, which precedes the
			// lock call and the 10ms sleep inside fn
			if h.HeldFor <= 0 {
				t.Errorf("HeldFor = %v", h.HeldFor)
			}
			want := keyhash.Int64(key)
			wantLock := fmt.Sprintf("classid=%d objid=%d objsubid=1", uint32(uint64(want)>>32), uint32(want))
			if h.Lock != wantLock {
				t.Errorf("Lock = %q, want %q", h.Lock, wantLock)
			}
		} else {
			if h.State != "Sleep" || h.Lock != keyhash.MySQLName("", key) {
				t.Errorf("mariadb details: %+v", h)
			}
		}
		if h := holderOf(t, db, key); h.Held {
			t.Fatalf("still held after Transaction: %v", h)
		}
	})
}

func TestHolderNamespace(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := openGorm(t, k)
		if err := db.Use(gormlock.New(ormlock.WithNamespace("holderns"))); err != nil {
			t.Fatal(err)
		}
		key := "holder-ns-" + t.Name()
		err := gormlock.Transaction(db, key, func(tx *gorm.DB) error {
			pid := connID(t, k, mustSQLTx(t, tx))
			if h := holderOf(t, db, key); !h.Held || h.PID != pid {
				return fmt.Errorf("with the plugin's namespace: %v, want pid %d", h, pid)
			}
			if h := holderOf(t, db, key, ormlock.WithNamespace("holderns")); !h.Held || h.PID != pid {
				return fmt.Errorf("with the namespace per call: %v", h)
			}
			if h := holderOf(t, db, key, ormlock.WithNamespace("")); h.Held {
				return fmt.Errorf("without the namespace, another key, yet held: %v", h)
			}
			// inside the holder's own transaction too
			if h := holderOf(t, tx, key); !h.Held || h.PID != pid {
				return fmt.Errorf("from the holder's transaction: %v", h)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// mustSQLTx returns the transaction under a GORM transaction: a *sql.Tx,
// or with pgx the pinned connection BEGIN and the lock were sent on.
func mustSQLTx(t *testing.T, tx *gorm.DB) gorm.ConnPool {
	t.Helper()
	if _, ok := tx.Statement.ConnPool.(gorm.TxCommitter); !ok {
		t.Fatalf("ConnPool is %T, not a transaction", tx.Statement.ConnPool)
	}
	return tx.Statement.ConnPool
}

// Numeric keys: the pg_locks coordinates of a bigint (classid high half,
// objid low half, objsubid 1) and of a pair (objsubid 2), with negative
// halves, which pg_locks shows as unsigned oids.
func TestHolderNumericKeys(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := openGorm(t, k)
		base := keyhash.Int64("holder-num-" + t.Name())
		keys := []ormlock.Key{
			ormlock.ID(base | -1<<63 | 1<<31), // both halves with the high bit set
			ormlock.ID(base &^ (-1 << 63) &^ (1 << 31)),
			ormlock.Pair(-7, int32(base)|-1<<31),
			ormlock.Pair(7, int32(base)&0x7fffffff),
		}
		for _, key := range keys {
			err := gormlock.Transaction(db, key, func(tx *gorm.DB) error {
				pid := connID(t, k, mustSQLTx(t, tx))
				if h := holderOf(t, db, key); !h.Held || h.PID != pid {
					return fmt.Errorf("%v: %v, want pid %d", key, h, pid)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if k.Dialect() != "postgres" {
			return
		}
		// a bigint whose halves equal a pair's is a different lock
		err := gormlock.Transaction(db, ormlock.ID(7<<32|9), func(*gorm.DB) error {
			if h := holderOf(t, db, ormlock.Pair(7, 9)); h.Held {
				return fmt.Errorf("pair (7,9) reported held by the bigint 7<<32|9: %v", h)
			}
			if h := holderOf(t, db, ormlock.ID(7<<32|9)); !h.Held || h.Lock != "classid=7 objid=9 objsubid=1" {
				return fmt.Errorf("bigint: %v %q", h, h.Lock)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

func TestHolderSession(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := openGorm(t, k)
		key := "holder-sess-" + t.Name()
		err := gormlock.Session(db, key, func(ctx context.Context) error {
			h, err := gormlock.Holder(db.WithContext(ctx), key)
			if err != nil {
				return err
			}
			t.Logf("Session's lock connection: %s", h)
			if !h.Held || h.PID == 0 {
				return fmt.Errorf("holder %+v", h)
			}
			want := "Sleep"
			if k.Dialect() == "postgres" {
				want = "idle in transaction"
			}
			// the keepalive runs on that connection every 100ms: between
			// its checks the connection is idle
			for i := 0; h.State != want && i < 50; i++ {
				time.Sleep(20 * time.Millisecond)
				if h, err = gormlock.Holder(db.WithContext(ctx), key); err != nil {
					return err
				}
			}
			if h.State != want {
				return fmt.Errorf("state %q, want %q", h.State, want)
			}
			// the reported connection is the one that holds the lock: end
			// it and the Session loses its lock
			testdb.Kill(t, k, h.PID)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(30 * time.Second):
				return errors.New("loss not seen within 30s")
			}
		}, ormlock.WithKeepalive(100*time.Millisecond))
		if !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("err = %v, want ErrLockLost after ending the reported holder", err)
		}
	})
}

// A lock taken by hand-written SQL, as existing code would.
func TestHolderRawSQL(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := openGorm(t, k)
		key := "holder-raw-" + t.Name()
		ctx := context.Background()
		pool := testdb.Open(t, k)
		t.Cleanup(func() { testdb.AssertNoLeaks(t, k, pool) })
		conn, err := pool.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		pid := connID(t, k, conn)
		if k.Dialect() == "postgres" {
			// session-level through PgBouncer would not stick to one
			// server connection: hold it in a transaction there
			if k == testdb.PgBouncer {
				tx, err := conn.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback()
				pid = connID(t, k, tx)
				_, err = tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", keyhash.Int64(key))
				if err != nil {
					t.Fatal(err)
				}
			} else {
				if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", keyhash.Int64(key)); err != nil {
					t.Fatal(err)
				}
				defer conn.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", keyhash.Int64(key))
			}
		} else {
			name := keyhash.MySQLName("", key)
			var ok bool
			if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0) = 1", name).Scan(&ok); err != nil || !ok {
				t.Fatalf("GET_LOCK: %v %v", ok, err)
			}
			defer conn.ExecContext(ctx, "SELECT RELEASE_LOCK(?)", name)
		}
		h := holderOf(t, db, key)
		t.Logf("raw holder: %s", h)
		if !h.Held || h.PID != pid {
			t.Fatalf("Holder = %+v, want pid %d", h, pid)
		}
		if k == testdb.Postgres && (h.State != "idle" || !h.TxStart.IsZero() || h.HeldFor <= 0) {
			// a session-level lock outside a transaction: HeldFor runs
			// from the connection's start
			t.Errorf("session-level holder: %+v", h)
		}
	})
}

// Sessions queued with WithWait show up as Waiters on PostgreSQL.
func TestHolderWaitersPostgres(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			db, _ := openGorm(t, k)
			waiter, _ := openGorm(t, k)
			key := "holder-wait-" + t.Name()
			done := make(chan error, 1)
			err := gormlock.Transaction(db, key, func(*gorm.DB) error {
				go func() {
					done <- gormlock.Transaction(waiter, key, func(*gorm.DB) error { return nil }, ormlock.WithWait(30*time.Second))
				}()
				deadline := time.Now().Add(10 * time.Second)
				for {
					h := holderOf(t, db, key)
					if !h.Held {
						return fmt.Errorf("not held: %v", h)
					}
					if h.Waiters == 1 {
						t.Logf("with one waiter: %s", h)
						return nil
					}
					if time.Now().After(deadline) {
						return fmt.Errorf("waiter not seen within 10s: %v", h)
					}
					time.Sleep(20 * time.Millisecond)
				}
			})
			werr := <-done // the waiter gets the lock once fn has returned
			if err != nil {
				t.Fatal(err)
			}
			if werr != nil {
				t.Fatalf("waiter: %v", werr)
			}
		})
	}
}

func TestHolderBadInput(t *testing.T) {
	db, _ := openGorm(t, testdb.Postgres)
	if _, err := gormlock.Holder(db, ""); !errors.Is(err, ormlock.ErrInvalidKey) {
		t.Errorf("empty key: %v", err)
	}
	if _, err := gormlock.Holder(db, ormlock.Key{}); !errors.Is(err, ormlock.ErrInvalidKey) {
		t.Errorf("zero Key: %v", err)
	}
	if _, err := gormlock.Holder(nil, "k"); !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "gormlock.Holder") {
		t.Errorf("nil db: %v", err)
	}
	if _, err := gormlock.Holder(db, "k", ormlock.WithNamespace("a:b")); !errors.Is(err, ormlock.ErrInvalidKey) {
		t.Errorf("bad namespace: %v", err)
	}
	dummy, err := gorm.Open(tests.DummyDialector{}, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gormlock.Holder(dummy, "k"); !errors.Is(err, ormlock.ErrUnsupportedDialect) {
		t.Errorf("dummy dialect: %v", err)
	}
}

// Why didn't the nightly job run? Ask who holds its lock.
func ExampleHolder() {
	var db *gorm.DB // opened elsewhere
	err := gormlock.Transaction(db, "daily-settlement", func(tx *gorm.DB) error { return nil })
	if errors.Is(err, ormlock.ErrNotAcquired) {
		h, herr := gormlock.Holder(db, "daily-settlement")
		if herr == nil && h.Held {
			// e.g. held pid=5311 user=app client=10.0.0.7:56870 state="idle in transaction" held_for=2h0m3s ...
			fmt.Printf("daily-settlement is held: %s\n", h)
		}
	}
}
