package gormlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/gormtest"
	"github.com/ormlock/ormlock/internal/leakcheck"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
)

// sessionKeepalive is the keepalive interval of the loss tests.
const sessionKeepalive = 200 * time.Millisecond

// Behind PgBouncer in transaction mode, the Session's lock lives in a
// transaction, so PgBouncer keeps its server connection out of the pool: no
// other client transaction can land on it and take the lock.
func TestSessionBehindPgBouncer(t *testing.T) {
	leakcheck.Goroutines(t, testdb.PgBouncer)
	k := testdb.PgBouncer
	db, _ := gormtest.Open(t, k)
	others := make([]*gorm.DB, 3)
	for i := range others {
		others[i], _ = gormtest.Open(t, k)
	}
	key := "s-bouncer-" + t.Name()
	id := keyhash.Int64(key)
	const attempts = 60
	err := gormlock.Session(db, key, func(ctx context.Context) error {
		var mu sync.Mutex
		pids := map[int64]bool{}
		var wg sync.WaitGroup
		errs := make(chan error, 2*attempts)
		for i := range attempts {
			other := others[i%len(others)]
			wg.Go(func() {
				err := gormlock.Transaction(other, key, func(*gorm.DB) error { return errors.New("fn ran") })
				if !errors.Is(err, ormlock.ErrNotAcquired) {
					errs <- fmt.Errorf("gormlock.Transaction through PgBouncer: %v, want ErrNotAcquired", err)
				}
				// hand-written SQL in a transaction, as other code would
				err = other.Transaction(func(tx *gorm.DB) error {
					var got struct {
						Pid int64
						Ok  bool
					}
					if err := tx.Raw("SELECT pg_backend_pid() AS pid, pg_try_advisory_xact_lock(?) AS ok", id).Scan(&got).Error; err != nil {
						return err
					}
					mu.Lock()
					pids[got.Pid] = true
					mu.Unlock()
					if got.Ok {
						return fmt.Errorf("backend %d took the lock held by the Session", got.Pid)
					}
					return nil
				})
				if err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		if err, ok := <-errs; ok {
			return err
		}
		t.Logf("%d transactions through PgBouncer on %d server connections: none took the lock", 2*attempts, len(pids))
		if len(pids) < 2 {
			return fmt.Errorf("all transactions ran on %d server connection(s): PgBouncer did not spread them", len(pids))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Why not a session-level lock: through PgBouncer, the server connection
	// that holds it goes back to PgBouncer's pool after each transaction,
	// and the next client that lands on it "takes" the lock again.
	t.Run("session-level lock excludes nobody", func(t *testing.T) {
		a, _ := gormtest.Open(t, k)
		b, _ := gormtest.Open(t, k)
		admin := testdb.AdminDB(t, k)
		name := "s-bouncer-session-" + t.Name()
		t.Cleanup(func() {
			// The lock belongs to a PgBouncer server connection no client
			// holds: end that backend (PgBouncer drops it from its pool).
			rows, err := admin.Query("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND classid::int8 = $1 AND objid::int8 = $2",
				int64(uint64(keyhash.Int64(name))>>32), int64(uint64(keyhash.Int64(name))&0xffffffff))
			if err != nil {
				t.Error(err)
				return
			}
			rows.Close()
		})
		var ok bool
		if err := a.Raw("SELECT pg_try_advisory_lock(?)", keyhash.Int64(name)).Scan(&ok).Error; err != nil || !ok {
			t.Fatalf("first session lock: ok=%v err=%v", ok, err)
		}
		taken := 0
		for range 5 {
			if err := b.Raw("SELECT pg_try_advisory_lock(?)", keyhash.Int64(name)).Scan(&ok).Error; err != nil {
				t.Fatal(err)
			}
			if ok {
				taken++
			}
		}
		if taken == 0 {
			t.Fatal("another client never took the session-level lock: PgBouncer kept the server connection to the first client")
		}
		t.Logf("another client took the session-level lock %d of 5 times through PgBouncer", taken)
	})
}

// fn does its work through the normal pool, on other connections than the
// one holding the lock.
func TestSessionUsesPool(t *testing.T) {
	leakcheck.Goroutines(t)
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := gormtest.Open(t, k)
		tbl := table(t, k, db)
		admin := testdb.AdminDB(t, k)
		key := "s-pool-" + t.Name()
		err := gormlock.Session(db, key, func(ctx context.Context) error {
			lock := lockConn(t, k.Dialect(), admin, key)
			idQuery := "SELECT CONNECTION_ID()"
			if k.Dialect() == "postgres" {
				idQuery = "SELECT pg_backend_pid()"
			}
			for i := range 5 {
				var id int64
				if err := db.WithContext(ctx).Raw(idQuery).Scan(&id).Error; err != nil {
					return err
				}
				if id == lock.id {
					return fmt.Errorf("fn's query ran on the lock connection %d", id)
				}
				if err := db.WithContext(ctx).Exec("INSERT INTO "+tbl+" (id, note) VALUES (?, 'x')", i).Error; err != nil {
					return err
				}
			}
			// a transaction of fn's own is fine too
			return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				return tx.Exec("UPDATE " + tbl + " SET note = 'y'").Error
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		if n := count(t, db, tbl); n != 5 {
			t.Fatalf("rows = %d, want 5", n)
		}
	})
}

// The idle lock transaction holds no snapshot (backend_xmin IS NULL), so it
// does not hold back VACUUM: with pgx's default extended protocol (Postgres)
// and with the simple protocol (PgBouncer DSN).
func TestSessionHoldsNoSnapshot(t *testing.T) {
	leakcheck.Goroutines(t, testdb.Postgres, testdb.PgBouncer)
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			db, sqlDB := gormtest.Open(t, k)
			tbl := table(t, k, db)
			admin := testdb.AdminDB(t, k)
			key := "s-xmin-" + t.Name()
			if k == testdb.Postgres {
				// Control: the check below does see a snapshot when one is
				// held. An idle transaction whose last statement was an
				// extended-protocol query keeps its portal, and so its
				// backend_xmin (what the Session must avoid).
				ctl := "s-xmin-control-" + t.Name()
				tx, err := sqlDB.Begin()
				if err != nil {
					t.Fatal(err)
				}
				var ok bool
				if err := tx.QueryRow("SELECT pg_try_advisory_xact_lock($1)", keyhash.Int64(ctl)).Scan(&ok); err != nil || !ok {
					t.Fatalf("control lock: ok=%v err=%v", ok, err)
				}
				b := lockConn(t, k.Dialect(), admin, ctl)
				_ = tx.Rollback()
				if b.xminNull {
					t.Fatalf("control: idle transaction after an extended-protocol query shows no backend_xmin (state %q); the check below proves nothing", b.state)
				}
			}
			err := gormlock.Session(db, key, func(ctx context.Context) error {
				// other work moves the xid horizon on meanwhile
				for i := range 3 {
					if err := db.WithContext(ctx).Exec("INSERT INTO "+tbl+" (id) VALUES (?)", i).Error; err != nil {
						return err
					}
				}
				// The backend shows 'active' while a keepalive runs: look
				// until it is seen idle.
				deadline := time.Now().Add(10 * time.Second)
				for {
					b := lockConn(t, k.Dialect(), admin, key)
					if b.state == "idle in transaction" {
						if !b.xminNull {
							return fmt.Errorf("lock backend %d holds a snapshot (backend_xmin is set)", b.id)
						}
						t.Logf("lock backend %d: state %q, backend_xmin NULL", b.id, b.state)
						return nil
					}
					if time.Now().After(deadline) {
						return fmt.Errorf("lock backend %d never seen idle in transaction (last state %q)", b.id, b.state)
					}
					time.Sleep(20 * time.Millisecond)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Bad input only gormlock can get; the rest is TestTransactionBadInput in
// internal/conformance.
func TestSessionBadInput(t *testing.T) {
	leakcheck.Goroutines(t, testdb.Postgres)
	called := false
	fn := func(context.Context) error { called = true; return nil }
	check := func(what string, err, want error, text string) {
		t.Helper()
		if !errors.Is(err, want) || !strings.Contains(err.Error(), text) {
			t.Errorf("%s: err = %v, want %v mentioning %q", what, err, want, text)
		}
		if !strings.HasPrefix(err.Error(), "ormlock: ") {
			t.Errorf("%s: error %q lacks the \"ormlock: \" prefix", what, err)
		}
	}
	check("nil db", gormlock.Session(nil, "k", fn), ormlock.ErrInvalidArgument, "nil *gorm.DB")
	if called {
		t.Error("fn called on bad input")
	}
}
