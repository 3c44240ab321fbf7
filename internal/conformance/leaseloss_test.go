package conformance_test

// Leases as they are lost (docs/RELIABILITY.md, Leases lost): on every
// server, a holder whose lease row is taken over after expiry, deleted or
// changed by hand, whose renewals are blocked (a frozen server, a row
// lock held by another connection), or whose server's clock steps forward
// learns of the loss within its deadline (fn's ctx cancelled with cause
// ErrLockLost, before the key is granted again), and its fenced writes
// are refused after the next holder's. The promoted server whose clock
// differs is in package failover (TestPGLeasePromotedClockAhead).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/holding"
	"github.com/ormlock/ormlock/sqllock"
)

// lossTTL is the leases' TTL here: short, so that a loss shows in seconds.
const lossTTL = 2 * time.Second

// leaseHolder is a Session holding a lease in the background.
type leaseHolder struct{ *holding.Holding }

// holdLease starts a Session of key on db under a lease of lossTTL and
// waits until fn runs.
func holdLease(t *testing.T, db *sql.DB, key string, opts ...ormlock.Option) leaseHolder {
	t.Helper()
	return leaseHolder{holding.Start(t, db, key, append([]ormlock.Option{ormlock.WithLease(lossTTL)}, opts...)...)}
}

// waitLost waits for the holder to learn of the loss (waitCancelled),
// then for Session to return ErrLockLost (waitReturned).
func (h leaseHolder) waitLost(t *testing.T) {
	t.Helper()
	h.waitCancelled(t)
	h.waitReturned(t)
}

// waitCancelled waits for the holder's fn ctx to end, at most its TTL
// and a second (its deadline runs from its last renewal, at most a TTL
// before now), and checks the cause is ErrLockLost.
func (h leaseHolder) waitCancelled(t *testing.T) {
	t.Helper()
	start := time.Now()
	h.WaitCancelled(t, "the holder", lossTTL+time.Second)
	t.Logf("figure: the holder learned of the loss %v after it", h.EndedAt.Sub(start).Round(time.Millisecond))
}

// waitReturned waits for Session to return after the loss and checks its
// error is ErrLockLost.
func (h leaseHolder) waitReturned(t *testing.T) {
	t.Helper()
	h.WaitReturned(t, "the holder", 30*time.Second)
}

// lostReturn bounds how long after the holder learned of its loss
// Session may take to return while the server does not answer its
// release: the release of a lease known lost is given a second
// (leaseLostGrace), and the rest is slack for a loaded machine; far
// below the 15s release timeout it waited before.
const lostReturn = 5 * time.Second

// waitReturnedWithin is waitReturned, failing when Session did not
// return within d of the holder's learning of the loss.
func (h leaseHolder) waitReturnedWithin(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case err := <-h.Err:
		if !errors.Is(err, ormlock.ErrLockLost) {
			t.Errorf("Session returned %v, want ErrLockLost", err)
		}
		t.Logf("figure: Session returned %v after the holder learned of the loss", time.Since(h.EndedAt).Round(time.Millisecond))
	case <-time.After(time.Until(h.EndedAt.Add(d))):
		t.Errorf("Session did not return within %v of the loss while the server did not answer its release", d)
		h.waitReturned(t)
	}
}

// takeLease takes key once on db, waiting up to wait, and returns the
// epoch and when fn ran.
func takeLease(t *testing.T, db *sql.DB, key string, wait time.Duration) (int64, time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		tok int64
		at  time.Time
	)
	err := sqllock.Session(ctx, db, key, func(ctx context.Context) error {
		at = time.Now()
		tok, _ = ormlock.FencingToken(ctx)
		return nil
	}, ormlock.WithLease(lossTTL), ormlock.WithWait(wait))
	if err != nil {
		t.Fatalf("taking %q after the loss: %v", key, err)
	}
	return tok, at
}

// fenced is a table with one fenced row on kind k's shared server.
type fenced struct {
	admin   *sql.DB
	dialect string
	table   string
}

func newFenced(t *testing.T, k testdb.Kind, admin *sql.DB) fenced {
	t.Helper()
	f := fenced{admin, k.Dialect(), testdb.TableName(t, "lease_fenced")}
	t.Cleanup(func() { _, _ = admin.Exec("DROP TABLE IF EXISTS " + f.table) })
	for _, q := range []string{
		"DROP TABLE IF EXISTS " + f.table,
		"CREATE TABLE " + f.table + " (id int PRIMARY KEY, fence bigint NOT NULL DEFAULT 0, v int NOT NULL DEFAULT 0)",
		"INSERT INTO " + f.table + " (id) VALUES (1)",
	} {
		if _, err := admin.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// write writes the row under token tok and returns CheckFenced's verdict.
func (f fenced) write(tok int64) error {
	if f.dialect == "postgres" {
		return sqllock.CheckFenced(f.admin.Exec("UPDATE "+f.table+" SET v = v + 1, fence = $1 WHERE id = 1 AND fence <= $1", tok))
	}
	return sqllock.CheckFenced(f.admin.Exec("UPDATE "+f.table+" SET v = v + 1, fence = ? WHERE id = 1 AND fence <= ?", tok, tok))
}

// afterLoss checks what follows every loss: the next holder gets a greater
// epoch, granted after the old holder learned (when learnedFirst), its
// fenced write passes, and the old holder's is refused.
func afterLoss(t *testing.T, h leaseHolder, db *sql.DB, f fenced, key string, learnedFirst bool) {
	t.Helper()
	if err := f.write(h.Epoch); err != nil {
		t.Fatalf("the holder's fenced write before the takeover: %v", err)
	}
	next, at := takeLease(t, db, key, 3*lossTTL)
	if next <= h.Epoch {
		t.Errorf("the next holder's epoch %d is not above the lost one's %d: fencing cannot tell them apart", next, h.Epoch)
	}
	if learnedFirst && !h.Lost() {
		t.Errorf("the key was granted again (%v) before the holder learned of its loss", at)
	} else if learnedFirst && !h.EndedAt.Before(at) {
		t.Errorf("the key was granted again (%v) before the holder learned of its loss (%v)", at, h.EndedAt)
	}
	if err := f.write(next); err != nil {
		t.Errorf("the next holder's fenced write: %v", err)
	}
	if err := f.write(h.Epoch); !errors.Is(err, ormlock.ErrStaleToken) {
		t.Errorf("the lost holder's fenced write after the takeover: %v, want ErrStaleToken", err)
	}
}

// leaseRow is the WHERE clause of key's lease row (its lock_key ends with
// the name; the keys here are unique per test).
func leaseRow(key string) string {
	return fmt.Sprintf("lock_key LIKE '%%%s' AND reader = ''", key)
}

// leaseNow is the server's clock in the lease table's terms.
func leaseNow(k testdb.Kind) string {
	if k == testdb.MariaDB {
		return "UTC_TIMESTAMP(6)"
	}
	return "clock_timestamp()"
}

// TestLeaseLoss: the ways a lease is lost, on every server.
func TestLeaseLoss(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := testdb.Open(t, k)
		admin := testdb.AdminDB(t, k)
		if err := sqllock.Migrate(context.Background(), db); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		key := func(t *testing.T) string {
			return "lease-loss-" + strings.ReplaceAll(t.Name()[strings.LastIndex(t.Name(), "/")+1:], " ", "-") + "-" + string(k)
		}
		t.Run("deleted by hand", func(t *testing.T) {
			name := key(t)
			f := newFenced(t, k, admin)
			h := holdLease(t, db, name)
			if _, err := admin.Exec("DELETE FROM ormlock_leases WHERE " + leaseRow(name)); err != nil {
				t.Fatal(err)
			}
			h.waitLost(t)
			afterLoss(t, h, db, f, name, true)
		})
		t.Run("changed by hand", func(t *testing.T) {
			name := key(t)
			f := newFenced(t, k, admin)
			h := holdLease(t, db, name)
			if _, err := admin.Exec("UPDATE ormlock_leases SET holder = 'someone-else' WHERE " + leaseRow(name)); err != nil {
				t.Fatal(err)
			}
			h.waitLost(t)
			afterLoss(t, h, db, f, name, true)
		})
		t.Run("expired by hand and taken over", func(t *testing.T) {
			name := key(t)
			f := newFenced(t, k, admin)
			h := holdLease(t, db, name)
			if err := f.write(h.Epoch); err != nil {
				t.Fatal(err)
			}
			if _, err := admin.Exec("UPDATE ormlock_leases SET expires_at = " + leaseNow(k) + " WHERE " + leaseRow(name)); err != nil {
				t.Fatal(err)
			}
			next, _ := takeLease(t, db, name, 0)
			h.waitLost(t)
			if next <= h.Epoch {
				t.Errorf("takeover epoch %d, want above %d", next, h.Epoch)
			}
			if err := f.write(next); err != nil {
				t.Errorf("the next holder's fenced write: %v", err)
			}
			if err := f.write(h.Epoch); !errors.Is(err, ormlock.ErrStaleToken) {
				t.Errorf("the lost holder's fenced write: %v, want ErrStaleToken", err)
			}
		})
		t.Run("row lock held", func(t *testing.T) {
			name := key(t)
			db, admin := db, admin
			if k == testdb.PgBouncer {
				// The holder's renewal, blocked on the row lock, is
				// cancelled at its deadline: pgx sends a cancel request,
				// which crashes PgBouncer 1.18 at times ("FATAL
				// disconnect_client(): bad client state: 0", pgbouncer
				// #801, fixed in 1.19.1), so on a PgBouncer of its own.
				db, admin = privateServer(t, k)
			}
			f := newFenced(t, k, admin)
			h := holdLease(t, db, name)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			blocker, err := admin.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var n int
			if err := blocker.QueryRowContext(ctx, "SELECT COUNT(*) FROM (SELECT epoch FROM ormlock_leases WHERE "+leaseRow(name)+" FOR UPDATE) x").Scan(&n); err != nil || n != 1 {
				t.Fatalf("lock the lease row: %d rows, %v", n, err)
			}
			h.waitCancelled(t)
			// the row lock also holds the holder's release back; a lease
			// known lost gives its release a second, not releaseTimeout
			// (15s), so Session returns while the row lock is still held
			h.waitReturnedWithin(t, lostReturn)
			if err := blocker.Rollback(); err != nil {
				t.Fatal(err)
			}
			afterLoss(t, h, db, f, name, true)
		})
		t.Run("frozen server", func(t *testing.T) {
			name := key(t)
			db, admin := db, admin
			var p *testdb.Proxy
			var dsn string
			if k == testdb.PgBouncer {
				// the holder's cancelled renewal reaches PgBouncer when
				// the proxy thaws: on a PgBouncer of its own, as above
				var s *testdb.Server
				s, db, admin = privateServerOf(t, k)
				p = testdb.StartProxy(t, s.Addr())
				dsn = strings.Replace(s.DSN(), s.Addr(), p.Addr(), 1)
			} else {
				p, dsn = testdb.ProxyDSN(t, k)
			}
			f := newFenced(t, k, admin)
			frozenDB, err := sql.Open(k.Driver(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer frozenDB.Close()
			h := holdLease(t, frozenDB, name)
			p.FreezeAll()
			h.waitCancelled(t)
			// the server is fine; only the holder's way to it froze: the
			// key is taken over once the lease expired, and the holder's
			// release, of a lease known lost, is given up after a second
			h.waitReturnedWithin(t, lostReturn)
			afterLoss(t, h, db, f, name, true)
			p.Thaw()
		})
	})
}

// privateServer starts a private server of kind k with the tables of
// Migrate and returns a pool of its clients' DSN and an admin pool.
func privateServer(t *testing.T, k testdb.Kind) (db, admin *sql.DB) {
	t.Helper()
	_, db, admin = privateServerOf(t, k)
	return db, admin
}

// privateServerOf is privateServer, returning the server too.
func privateServerOf(t *testing.T, k testdb.Kind) (s *testdb.Server, db, admin *sql.DB) {
	t.Helper()
	s = testdb.Start(t, k)
	db, err := sql.Open(k.Driver(), s.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if admin, err = sql.Open(k.Driver(), s.AdminDSN()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	if err := sqllock.Migrate(context.Background(), db); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return s, db, admin
}

// TestLeaseLossClockStep: a private server's clock steps 10s forward
// (libfaketime) under a holder of a 2s lease: by the server's clock the
// lease has expired, another client takes it over at once with a greater
// epoch, the holder learns at its next renewal (within its deadline), and
// its fenced writes are refused.
func TestLeaseLossClockStep(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		s := testdb.StartFaked(t, k)
		db, err := sql.Open(k.Driver(), s.DSN())
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		admin, err := sql.Open(k.Driver(), s.AdminDSN())
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close()
		if err := sqllock.Migrate(context.Background(), db); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		f := newFenced(t, k, admin)
		h := holdLease(t, db, "lease-clock-step")
		if err := f.write(h.Epoch); err != nil {
			t.Fatal(err)
		}
		s.Clock().Step(t, 10*time.Second)
		next, at := takeLease(t, db, "lease-clock-step", 0)
		h.waitLost(t)
		t.Logf("figure: %s, clock stepped 10s forward under a %v lease: taken over with epoch %d (was %d); the holder learned %v after the takeover",
			k, lossTTL, next, h.Epoch, h.EndedAt.Sub(at).Round(time.Millisecond))
		if next <= h.Epoch {
			t.Errorf("takeover epoch %d, want above %d", next, h.Epoch)
		}
		if err := f.write(next); err != nil {
			t.Errorf("the next holder's fenced write: %v", err)
		}
		if err := f.write(h.Epoch); !errors.Is(err, ormlock.ErrStaleToken) {
			t.Errorf("the lost holder's fenced write: %v, want ErrStaleToken", err)
		}
		s.AssertNoLeaks(t, db)
	})
}
