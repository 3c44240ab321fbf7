package lockproto_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
)

func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }

func TestDialectOf(t *testing.T) {
	for name, want := range map[string]lockproto.Dialect{"postgres": lockproto.Postgres, "pgx": lockproto.Postgres, "mysql": lockproto.MySQL} {
		if d, err := lockproto.DialectOf(name); err != nil || d != want {
			t.Errorf("%s -> %v, %v", name, d, err)
		}
	}
	for _, name := range []string{"sqlite", "sqlite3", "sqlserver", ""} {
		if _, err := lockproto.DialectOf(name); !errors.Is(err, ormlock.ErrUnsupportedDialect) {
			t.Errorf("%q: %v", name, err)
		}
	}
}

func TestPostgresXact(t *testing.T) {
	ctx := context.Background()
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			db := testdb.Open(t, k)
			t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
			key := keys.Postgres(keys.Name(t.Name()), "")
			pair := keys.Postgres(keys.Pair(11, 22), "")

			tx1, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, pk := range []keys.PostgresKey{key, pair} {
				if ok, err := lockproto.PGTryXact(ctx, tx1, pk, nil, nil); err != nil || !ok {
					t.Fatalf("first try: %v %v", ok, err)
				}
			}
			tx2, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := lockproto.PGTryXact(ctx, tx2, key, nil, nil); err != nil || ok {
				t.Fatalf("second try while held: %v %v", ok, err)
			}
			if ok, err := lockproto.PGWaitXact(ctx, tx2, pair, 100*time.Millisecond, nil, nil); err != nil || ok {
				t.Fatalf("wait while held: %v %v", ok, err)
			}
			_ = tx2.Rollback() // aborted by lock_timeout
			if err := tx1.Commit(); err != nil {
				t.Fatal(err)
			}
			tx3, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx3.Rollback()
			if ok, err := lockproto.PGWaitXact(ctx, tx3, key, time.Second, nil, nil); err != nil || !ok {
				t.Fatalf("wait after release: %v %v", ok, err)
			}
			var lt string
			if err := tx3.QueryRow("SELECT current_setting('lock_timeout')").Scan(&lt); err != nil || lt != "0" {
				t.Fatalf("lock_timeout not restored: %q %v", lt, err)
			}
			if err := lockproto.PGPing(ctx, tx3); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestMySQLNamed(t *testing.T) {
	ctx := context.Background()
	k := testdb.MariaDB
	db := testdb.Open(t, k)
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
	name := keyhash.MySQLName("", t.Name())
	c1, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()

	if _, err := lockproto.MySQLKeepSession(ctx, c1, time.Hour); err != nil {
		t.Fatal(err)
	}
	if ok, err := lockproto.MySQLGetLock(ctx, c1, name, 0); err != nil || !ok {
		t.Fatalf("GET_LOCK: %v %v", ok, err)
	}
	if err := lockproto.MySQLHeld(ctx, c1, name); err != nil {
		t.Fatalf("held on c1: %v", err)
	}
	if err := lockproto.MySQLHeld(ctx, c2, name); !errors.Is(err, lockproto.ErrNotHeld) {
		t.Fatalf("held on c2: %v", err)
	}
	if ok, err := lockproto.MySQLGetLock(ctx, c2, name, 0); err != nil || ok {
		t.Fatalf("GET_LOCK elsewhere: %v %v", ok, err)
	}
	if ok, err := lockproto.MySQLGetLock(ctx, c2, name, 150*time.Millisecond); err != nil || ok {
		t.Fatalf("GET_LOCK wait elsewhere: %v %v", ok, err)
	}
	// 0: held by another connection
	if err := lockproto.MySQLReleaseLock(ctx, c2, name); !errors.Is(err, lockproto.ErrNotHeld) {
		t.Fatalf("release by non-owner: %v", err)
	}
	if err := lockproto.MySQLReleaseLock(ctx, c1, name); err != nil {
		t.Fatalf("release: %v", err)
	}
	// NULL: no such lock
	if err := lockproto.MySQLReleaseLock(ctx, c1, name); !errors.Is(err, lockproto.ErrNotHeld) {
		t.Fatalf("release of a free lock: %v", err)
	}
}

func TestDestroy(t *testing.T) {
	ctx := context.Background()
	k := testdb.MariaDB
	db := testdb.Open(t, k)
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
	name := keyhash.MySQLName("", t.Name())
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := lockproto.MySQLGetLock(ctx, conn, name, 0); err != nil || !ok {
		t.Fatalf("GET_LOCK: %v %v", ok, err)
	}
	lockproto.Destroy(conn)
	if s := db.Stats(); s.Idle != 0 || s.InUse != 0 {
		t.Fatalf("destroyed connection kept by the pool: %+v", s)
	}
	// the server frees the lock when the connection closes
	deadline := time.Now().Add(5 * time.Second)
	for {
		var free bool
		if err := db.QueryRow("SELECT IS_FREE_LOCK(?)", name).Scan(&free); err != nil {
			t.Fatal(err)
		}
		if free {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("lock not freed after Destroy")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
