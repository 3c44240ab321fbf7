package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
)

// excludes reports whether b is refused its lock (ErrNotAcquired) while a
// holds a's lock; any other error fails the test.
func excludes(t *testing.T, dbA, dbB *gorm.DB, a, b lockName) bool {
	t.Helper()
	var errB error
	err := gormlock.Transaction(dbA, a.key, func(*gorm.DB) error {
		errB = gormlock.Transaction(dbB, b.key, func(*gorm.DB) error { return nil }, ormlock.WithNamespace(b.ns))
		return nil
	}, ormlock.WithNamespace(a.ns))
	if err != nil {
		t.Fatalf("A (%v in %q): %v", a.key, a.ns, err)
	}
	if errB != nil && !errors.Is(errB, ormlock.ErrNotAcquired) {
		t.Fatalf("B (%v in %q): %v", b.key, b.ns, errB)
	}
	return errB != nil
}

// TestNamespacesAreNoBoundary shows what docs/RELIABILITY.md's Security
// section says: a namespace keeps cooperating code apart, it does not
// isolate a tenant that tries. With the public API only, tenant A blocks
// tenant B's "job" in namespace "tenant-b" (PostgreSQL: an ID key of B's
// keyhash, which ignores A's namespace; MariaDB: the name "tenant-b:job"
// with the namespace cleared per call), and Holder shows A's connection to
// B.
func TestNamespacesAreNoBoundary(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		dbA, _ := openGorm(t, k)
		dbB, _ := openGorm(t, k)
		if err := dbA.Use(gormlock.New(ormlock.WithNamespace("tenant-a"))); err != nil {
			t.Fatal(err)
		}
		if err := dbB.Use(gormlock.New(ormlock.WithNamespace("tenant-b"))); err != nil {
			t.Fatal(err)
		}
		attack := ormlock.ID(keyhash.Int64NS("tenant-b", "job"))
		if k.Dialect() == "mysql" {
			attack = ormlock.Name("tenant-b:job")
		}
		var errB error
		var h ormlock.HolderInfo
		err := gormlock.Transaction(dbA, attack, func(*gorm.DB) error {
			errB = gormlock.Transaction(dbB, "job", func(*gorm.DB) error { return nil })
			var herr error
			if h, herr = gormlock.Holder(dbB, "job"); herr != nil {
				t.Errorf("B's Holder: %v", herr)
			}
			return nil
		}, ormlock.WithNamespace(""))
		if err != nil {
			t.Fatalf("A: %v", err)
		}
		if !errors.Is(errB, ormlock.ErrNotAcquired) || !h.Held || h.PID == 0 {
			t.Fatalf("%s: B got %v, Holder %v; the documented behaviour is that A can block B and B sees A", k, errB, h)
		}
		t.Logf("figure: %s: tenant A held tenant B's lock with %v; B got %v; B's Holder: %s", k, attack, errB, h)
	})
}

// TestMySQLKeyCollisions: the key mappings documented to collide on
// MySQL/MariaDB (key.go, docs/PROTOCOL.md) do, and stay apart on
// PostgreSQL, where an ID or a Pair ignores the namespace instead; keys
// documented as distinct never exclude each other.
func TestMySQLKeyCollisions(t *testing.T) {
	for _, c := range []struct {
		a, b        lockName
		pg, mariadb bool // documented to exclude each other
	}{
		{lockName{key: ormlock.ID(42)}, named("42"), false, true},
		{lockName{key: ormlock.Pair(1, 2)}, named("1:2"), false, true},
		{lockName{key: ormlock.Name("y"), ns: "x"}, named("x:y"), false, true},
		{lockName{key: ormlock.ID(7), ns: "x"}, named("x:7"), false, true},
		{lockName{key: ormlock.Pair(1, 2), ns: "x"}, lockName{key: ormlock.Name("1:2"), ns: "x"}, false, true},
		{lockName{key: ormlock.ID(42)}, lockName{key: ormlock.ID(42), ns: "x"}, true, false},
		{lockName{key: ormlock.Pair(1, 2)}, lockName{key: ormlock.Pair(1, 2), ns: "x"}, true, false},
		{named("y"), lockName{key: ormlock.Name("y"), ns: "x"}, false, false},
		{lockName{key: ormlock.Name("y"), ns: "x"}, lockName{key: ormlock.Name("y"), ns: "z"}, false, false},
		{lockName{key: ormlock.Pair(4, 2)}, lockName{key: ormlock.ID(42)}, false, false},
		{named(strings.Repeat("a", 70)), named(strings.Repeat("a", 69) + "b"), false, false},
	} {
		testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
			dbA, _ := openGorm(t, k)
			dbB, _ := openGorm(t, k)
			want := c.pg
			if k.Dialect() == "mysql" {
				want = c.mariadb
			}
			if got := excludes(t, dbA, dbB, c.a, c.b); got != want {
				t.Errorf("%v in %q vs %v in %q: exclude %v, documented %v", c.a.key, c.a.ns, c.b.key, c.b.ns, got, want)
			}
		})
	}
}

// bigEvents is an observer that records the longest event text it saw.
type bigEvents struct {
	mu  sync.Mutex
	max int
}

func (b *bigEvents) Observe(_ context.Context, e ormlock.Event) {
	n := len(e.Key.String()) + len(e.Namespace)
	if e.Err != nil {
		n += len(e.Err.Error())
	}
	b.mu.Lock()
	b.max = max(b.max, n)
	b.mu.Unlock()
}

// TestHugeNamesBounded: a 4 MiB lock name or namespace is refused with a
// short ErrInvalidKey before any SQL, by every verb on every server, and no
// error or observer event carries more than a few kilobytes.
func TestHugeNamesBounded(t *testing.T) {
	huge := strings.Repeat("x", 4<<20)
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := openGorm(t, k)
		var obs bigEvents
		opts := []ormlock.Option{ormlock.WithObserver(&obs)}
		fn := func(*gorm.DB) error { t.Error("fn called"); return nil }
		_, herr := gormlock.Holder(db, huge, opts...)
		for verb, err := range map[string]error{
			"Transaction":     gormlock.Transaction(db, huge, fn, opts...),
			"Session":         gormlock.Session(db, huge, func(context.Context) error { t.Error("fn called"); return nil }, opts...),
			"Holder":          herr,
			"namespace":       gormlock.Transaction(db, "job", fn, append(opts, ormlock.WithNamespace(huge))...),
			"just over 1 KiB": gormlock.Transaction(db, strings.Repeat("é", keys.MaxNameLen/2)+"x", fn, opts...),
		} {
			if !errors.Is(err, ormlock.ErrInvalidKey) || len(err.Error()) > 512 {
				t.Errorf("%s %s: %d-byte error %.200v, want a short ErrInvalidKey", k, verb, len(fmt.Sprint(err)), err)
			}
		}
		// the longest accepted name locks, and what is echoed stays bounded
		long := strings.Repeat("k", keys.MaxNameLen)
		var errB error
		if err := gormlock.Transaction(db, long, func(*gorm.DB) error {
			errB = gormlock.Transaction(db, long, fn, opts...)
			return nil
		}); err != nil {
			t.Fatalf("%s: name of MaxNameLen bytes: %v", k, err)
		}
		if !errors.Is(errB, ormlock.ErrNotAcquired) || len(errB.Error()) > 4096 {
			t.Errorf("%s: second holder of the long name: %d bytes, %v", k, len(errB.Error()), errB)
		}
		if obs.max > 8192 {
			t.Errorf("%s: an observer event carried %d bytes", k, obs.max)
		}
	})
}

// TestHolderExposure checks what ormlock.HolderInfo's docs say a caller
// without privileges sees of another user's lock: PostgreSQL (a plain LOGIN
// role): Held, PID, Lock, Mode, User and Database, and Query as
// "<insufficient privilege>", nothing else; MariaDB (a user without
// PROCESS): Held, PID and Lock. The superuser's own view includes the
// holder's last query, secret literal and all, which String leaves out.
func TestHolderExposure(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
		t.Run(string(k), func(t *testing.T) {
			admin := testdb.AdminDB(t, k)
			dsn := testdb.DSN(t, k)
			var peekDSN string
			if k == testdb.Postgres {
				if !strings.HasPrefix(dsn, "postgres://postgres@") {
					t.Skipf("DSN %q: cannot derive a role's DSN", dsn)
				}
				_, _ = admin.Exec("DROP ROLE IF EXISTS chaos_peek")
				t.Cleanup(func() { _, _ = admin.Exec("DROP ROLE IF EXISTS chaos_peek") })
				if _, err := admin.Exec("CREATE ROLE chaos_peek LOGIN"); err != nil {
					t.Fatal(err)
				}
				peekDSN = strings.Replace(dsn, "postgres://postgres@", "postgres://chaos_peek@", 1)
			} else {
				if !strings.HasPrefix(dsn, "root@") {
					t.Skipf("DSN %q: cannot derive a user's DSN", dsn)
				}
				_, _ = admin.Exec("DROP USER IF EXISTS 'chaos_peek'@'%'")
				t.Cleanup(func() { _, _ = admin.Exec("DROP USER IF EXISTS 'chaos_peek'@'%'") })
				if _, err := admin.Exec("CREATE USER 'chaos_peek'@'%'"); err != nil {
					t.Fatal(err)
				}
				// no grant at all: connect without a default database
				peekDSN = strings.Replace(strings.Replace(dsn, "root@", "chaos_peek@", 1), "/ormlock?", "/?", 1)
			}
			owner, _ := openGorm(t, k)
			peek, peekSQL := openDSN(t, k, peekDSN)
			t.Cleanup(func() { testdb.AssertNoLeaks(t, k, peekSQL) })
			const key = "chaos-holder-exposure"
			var mine, theirs ormlock.HolderInfo
			err := gormlock.Transaction(owner, key, func(tx *gorm.DB) error {
				if err := tx.Exec("SELECT 'hunter2' AS secret").Error; err != nil {
					return err
				}
				var err error
				if theirs, err = gormlock.Holder(peek, key); err != nil {
					return err
				}
				mine, err = gormlock.Holder(owner.Session(&gorm.Session{NewDB: true}), key)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("figure: %s: unprivileged view: %+v", k, theirs)
			if !theirs.Held || theirs.PID == 0 || theirs.PID != mine.PID || theirs.Lock == "" {
				t.Errorf("unprivileged: %+v, want Held, PID and Lock", theirs)
			}
			if theirs.Application != "" || theirs.ClientAddr != "" || theirs.State != "" || !theirs.TxStart.IsZero() || !theirs.ConnStart.IsZero() {
				t.Errorf("unprivileged sees more than documented: %+v", theirs)
			}
			if k == testdb.Postgres {
				if theirs.User != "postgres" || theirs.Database != "ormlock" || theirs.Mode != "ExclusiveLock" || theirs.Query != "<insufficient privilege>" {
					t.Errorf("PostgreSQL unprivileged: %+v, want user, database, mode and no query", theirs)
				}
				if !strings.Contains(mine.Query, "hunter2") {
					t.Errorf("superuser's view of the query: %q", mine.Query)
				}
			} else if theirs.User != "" || theirs.Database != "" || theirs.Query != "" {
				t.Errorf("MariaDB unprivileged: %+v, want only Held, PID and Lock", theirs)
			}
			if strings.Contains(mine.String(), "hunter2") || strings.Contains(theirs.String(), "insufficient") {
				t.Errorf("String prints the query: %s / %s", mine, theirs)
			}
		})
	}
}
