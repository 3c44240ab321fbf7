package gormlock_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/gormtest"
)

// pluginEvents checks that r saw attempt, acquired and released for key in
// namespace ns, in that order, and nothing else.
func pluginEvents(t *testing.T, r *testdb.Recorder, key, ns string) {
	t.Helper()
	es := r.Events()
	if got := r.Take(); got != "attempt,acquired,released" {
		t.Fatalf("events %s, want attempt,acquired,released", got)
	}
	for _, e := range es {
		if e.Key != ormlock.Name(key) || e.Namespace != ns || e.Verb != "Transaction" {
			t.Errorf("%v event: key=%v ns=%q verb=%q, want %q %q Transaction", e.Kind, e.Key, e.Namespace, e.Verb, key, ns)
		}
	}
}

// The events of Transaction and Session in every outcome (acquired, not
// acquired, fn error, panic, key forms, unreachable database, ended
// context, contention, a failed release on MariaDB, a lost Session) are
// tested once for every adapter, in internal/conformance (observer_test.go,
// with Event.Job and SlogObserver's lines). What
// stays here is GORM's: the plugin's default observer, the walkthrough of
// docs/TROUBLESHOOTING.md in GORM, and the cost of an observer.
func TestObserverPluginDefault(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := gormtest.Open(t, k)
		plugin, perCall := &testdb.Recorder{}, &testdb.Recorder{}
		if err := db.Use(gormlock.New(ormlock.WithObserver(plugin), ormlock.WithNamespace("obsplugin"))); err != nil {
			t.Fatal(err)
		}
		key := "obs-plugin-" + t.Name()
		if err := gormlock.Transaction(db, key, func(*gorm.DB) error { return nil }); err != nil {
			t.Fatal(err)
		}
		pluginEvents(t, plugin, key, "obsplugin")

		// a per-call observer replaces the plugin's
		plugin.Reset()
		if err := gormlock.Transaction(db, key, func(*gorm.DB) error { return nil }, ormlock.WithObserver(perCall)); err != nil {
			t.Fatal(err)
		}
		pluginEvents(t, perCall, key, "obsplugin")
		if got := plugin.Take(); got != "" {
			t.Fatalf("plugin observer also got %s", got)
		}
		// and WithObserver(nil) turns it off for one call
		if err := gormlock.Transaction(db, key, func(*gorm.DB) error { return nil }, ormlock.WithObserver(nil)); err != nil {
			t.Fatal(err)
		}
		if got := plugin.Take(); got != "" {
			t.Fatalf("WithObserver(nil): plugin observer got %s", got)
		}
	})
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Emit builds no event without an observer, and building and delivering one
// allocates nothing of its own.
func TestObserverEmitAllocs(t *testing.T) {
	ctx := context.Background()
	nop := ormlock.ObserverFunc(func(context.Context, ormlock.Event) {})
	for _, c := range []struct {
		name string
		obs  ormlock.Observer
	}{
		{"none", nil},
		{"no-op func", nop},
		{"slog, level disabled", ormlock.SlogObserver(slog.New(slog.DiscardHandler))},
	} {
		op, err := lockproto.NewOp(lockproto.Postgres, "Transaction", keys.Name("k"), config.New(ormlock.WithObserver(c.obs)))
		if err != nil {
			t.Fatal(err)
		}
		for _, kind := range []ormlock.EventKind{ormlock.EventAttempt, ormlock.EventAcquired, ormlock.EventReleased} {
			if n := testing.AllocsPerRun(100, func() { op.Emit(ctx, kind, nil) }); n != 0 {
				t.Errorf("%s: Emit(%v) allocates %.1f", c.name, kind, n)
			}
		}
	}
}

// BenchmarkTransactionObserver measures gormlock.Transaction (empty fn)
// against the real servers with no observer, a no-op observer, SlogObserver
// on a disabled handler and SlogObserver formatting every event (Debug) to
// io.Discard:
//
//	go test -run '^$' -bench BenchmarkTransactionObserver -benchmem ./gormlock/
func BenchmarkTransactionObserver(b *testing.B) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
		b.Run(string(k), func(b *testing.B) {
			sqlDB := testdb.Open(b, k)
			db := gormtest.On(b, k.Dialect(), sqlDB)
			b.Cleanup(func() { testdb.AssertNoLeaks(b, k, sqlDB) })
			name := "bench-obs-" + b.Name()
			noop := func(*gorm.DB) error { return nil }
			for _, c := range []struct {
				name string
				obs  ormlock.Observer
			}{
				{"None", nil},
				{"Func", ormlock.ObserverFunc(func(context.Context, ormlock.Event) {})},
				{"SlogDisabled", ormlock.SlogObserver(slog.New(slog.DiscardHandler))},
				{"SlogText", ormlock.SlogObserver(slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug})))},
			} {
				b.Run(c.name, func(b *testing.B) {
					b.ReportAllocs()
					opt := ormlock.WithObserver(c.obs)
					for b.Loop() {
						if err := gormlock.Transaction(db, name, noop, opt); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}

// TestObserverWalkthrough is docs/TROUBLESHOOTING.md's walkthrough: two
// replicas, each logging lock events at slog's default level (Info) and
// naming itself in application_name; the second finds the job's lock held
// and asks who holds it. Run with -v to see the lines.
func TestObserverWalkthrough(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
		t.Run(string(k), func(t *testing.T) {
			var mu sync.Mutex
			var buf bytes.Buffer
			logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil))
			replica := func(name string) *gorm.DB {
				dsn := testdb.DSN(t, k)
				driver := "mysql"
				if k.Dialect() == "postgres" {
					dsn += "&application_name=" + name
					driver = "pgx"
				}
				sqlDB, err := sql.Open(driver, dsn)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { sqlDB.Close() })
				t.Cleanup(func() { testdb.AssertNoLeaks(t, k, sqlDB) })
				db := gormtest.On(t, k.Dialect(), sqlDB)
				obs := ormlock.SlogObserver(logger.With("replica", name))
				if err := db.Use(gormlock.New(ormlock.WithObserver(obs), ormlock.WithNamespace("billing"))); err != nil {
					t.Fatal(err)
				}
				return db
			}
			a, b := replica("replica-a"), replica("replica-b")
			var holder ormlock.HolderInfo
			var pidA int64
			err := gormlock.Transaction(a, "daily-settlement", func(tx *gorm.DB) error {
				pidA = connID(t, k, mustSQLTx(t, tx))
				if err := tx.Exec("SELECT 1").Error; err != nil { // the job's work
					return err
				}
				time.Sleep(50 * time.Millisecond)
				err := gormlock.Transaction(b, "daily-settlement", func(*gorm.DB) error { return errors.New("ran twice") })
				if !errors.Is(err, ormlock.ErrNotAcquired) {
					return fmt.Errorf("replica-b: %v", err)
				}
				holder, err = gormlock.Holder(b, "daily-settlement")
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			out := buf.String()
			mu.Unlock()
			t.Logf("slog at Info:\n%s", out)
			type fields ormlock.HolderInfo // without the String method
			t.Logf("gormlock.Holder(b, \"daily-settlement\"):\n%s\n%+v", holder, fields(holder))
			if !holder.Held || holder.PID != pidA {
				t.Fatalf("holder %v, want replica-a's connection %d", holder, pidA)
			}
			if k.Dialect() == "postgres" && holder.Application != "replica-a" {
				t.Errorf("application %q, want replica-a", holder.Application)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 2 || !strings.Contains(lines[0], `level=INFO msg="ormlock: not_acquired" replica=replica-b`) ||
				!strings.Contains(lines[1], `level=INFO msg="ormlock: released" replica=replica-a`) {
				t.Fatalf("lines:\n%s", out)
			}
		})
	}
}
