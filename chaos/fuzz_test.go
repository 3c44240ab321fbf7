package chaos_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/testdb"
)

// nameSeeds are the key names every run tries: the seed corpus of
// FuzzKeyName, and the injection strings of TestInjectionNames.
var nameSeeds = []string{
	"daily-settlement",
	`'; DROP TABLE canary; --`,
	`"; DROP TABLE "canary"; --`,
	"`; DROP TABLE `canary`; --",
	`\'; DROP TABLE canary; --`,
	`\\'); SELECT pg_sleep(10); --`,
	`' OR '1'='1`,
	`back\slash\`,
	`\`,
	`%`,
	`%s%d%%`,
	`_`,
	`?`,
	`??`,
	`$1`,
	`$1::int8`,
	`$$ dollar $$`,
	`:name`,
	`@var`,
	`/* comment */`,
	"semi;colon",
	"tab\tnew\nline\rcr",
	" ",
	"  leading and trailing  ",
	"日本語のロック",
	"emoji 🔒🔑",
	"\u00a0nbsp\u200bzero-width",
	"Job",
	"job",
	strings.Repeat("x", 64),
	strings.Repeat("x", 65),
	strings.Repeat("k", 1024),
	strings.Repeat("é", 512), // 1 KB, 2-byte runes
	strings.Repeat("日", 341), // 1 KB less one, 3-byte runes
	// rejected: ErrInvalidKey
	"",
	"nul\x00byte",
	"\x00",
	"\xff\xfe invalid utf-8",
	"truncated \xe6\x97",
}

// nsSeeds are namespaces paired with some names.
var nsSeeds = []string{"", "tenant-a", "te'nant", `"ns"`, "ns;drop", strings.Repeat("n", 300), "a:b", "nul\x00", "\xc3\x28"}

// FuzzKeyName checks key names (and namespaces) against the real servers.
// Every name the library rejects gets ormlock.ErrInvalidKey from
// Transaction and Session, without fn being called; every name it accepts
// locks on PostgreSQL, PgBouncer and MariaDB (a second pool gets
// ErrNotAcquired, hand-written SQL on the derived key finds it held) and is
// released afterwards. go test runs the seed corpus; go test -fuzz
// FuzzKeyName ./chaos/ explores further.
func FuzzKeyName(f *testing.F) {
	for _, name := range nameSeeds {
		f.Add("", name)
	}
	for i, ns := range nsSeeds {
		f.Add(ns, nameSeeds[i%len(nameSeeds)])
		f.Add(ns, strings.Repeat("z", 60))
	}
	type target struct {
		k       testdb.Kind
		db, db2 *gorm.DB
		admin   *sql.DB
	}
	var targets []*target
	for _, k := range testdb.Kinds() {
		tg := &target{k: k, admin: testdb.AdminDB(f, k)}
		tg.db, _ = openGorm(f, k)
		tg.db2, _ = openGorm(f, k)
		targets = append(targets, tg)
	}
	f.Fuzz(func(t *testing.T, ns, name string) {
		key := ormlock.Name(name)
		want := key.Validate()
		if err := config.New(ormlock.WithNamespace(ns)).Err(); err != nil && want == nil {
			want = err
		}
		if want != nil && !errors.Is(want, ormlock.ErrInvalidKey) {
			t.Fatalf("validation of (%q, %q) = %v, want ErrInvalidKey", ns, name, want)
		}
		lock := lockName{key: key, ns: ns}
		opt := ormlock.WithNamespace(ns)
		for _, tg := range targets {
			d := tg.k.Dialect()
			called := false
			check := func() error {
				called = true
				mustHeld(t, d, tg.admin, lock)
				if err := gormlock.Transaction(tg.db2, name, func(*gorm.DB) error { return nil }, opt); !errors.Is(err, ormlock.ErrNotAcquired) {
					t.Errorf("%s: (%q, %q) held, second pool: %v, want ErrNotAcquired", tg.k, ns, name, err)
				}
				return nil
			}
			errTx := gormlock.Transaction(tg.db, name, func(*gorm.DB) error { return check() }, opt)
			errS := gormlock.Session(tg.db, name, func(context.Context) error { return check() }, opt)
			if want != nil {
				for verb, err := range map[string]error{"Transaction": errTx, "Session": errS} {
					if !errors.Is(err, ormlock.ErrInvalidKey) {
						t.Errorf("%s %s (%q, %q) = %v, want ErrInvalidKey", tg.k, verb, ns, name, err)
					}
				}
				if called {
					t.Errorf("%s: fn called for the invalid key (%q, %q)", tg.k, ns, name)
				}
				continue
			}
			if errTx != nil || errS != nil {
				t.Fatalf("%s (%q, %q): Transaction %v, Session %v", tg.k, ns, name, errTx, errS)
			}
			if !called {
				t.Fatalf("%s (%q, %q): fn not called", tg.k, ns, name)
			}
			mustFree(t, d, tg.admin, lock)
		}
	})
}
