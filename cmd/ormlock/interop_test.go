package main_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent"
	"github.com/ormlock/ormlock/pgxlock"
	"github.com/ormlock/ormlock/sqllock"
)

// A Go process holding the key (gormlock.Session) excludes the command, and
// a running command excludes gormlock.Session and gormlock.Transaction: the
// same keys, namespaces and numeric forms.
func TestGoAndCommandExcludeEachOther(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := openGorm(t, k)
		for _, c := range []struct {
			name, arg string
			key       ormlock.Key
			opts      []ormlock.Option
			flags     []string
		}{
			{"name", uniq(t, "name"), ormlock.Name(uniq(t, "name")), nil, nil},
			{"namespace", uniq(t, "ns"), ormlock.Name(uniq(t, "ns")), []ormlock.Option{ormlock.WithNamespace("cmdtest")}, []string{"--namespace", "cmdtest"}},
			{"id", "id:987654321012", ormlock.ID(987654321012), nil, nil},
			{"pair", "pair:-7,42", ormlock.Pair(-7, 42), nil, nil},
		} {
			t.Run(c.name, func(t *testing.T) {
				// Go holds it: the command does not run.
				held, stop := make(chan struct{}), make(chan struct{})
				errc := make(chan error, 1)
				go func() {
					errc <- gormlock.Session(db, c.key, func(ctx context.Context) error {
						close(held)
						<-stop
						return nil
					}, c.opts...)
				}()
				select {
				case <-held:
				case err := <-errc:
					t.Fatalf("Session: %v", err)
				}
				code, out, stderr := runBin(t, k, append(append([]string{"run"}, c.flags...), c.arg, "--", "echo", "ran")...)
				want(t, code, stderr, 75, "lock not acquired")
				if out != "" {
					t.Errorf("COMMAND ran while Go held the lock: %q", out)
				}
				close(stop)
				if err := <-errc; err != nil {
					t.Fatalf("Session: %v", err)
				}

				// The command holds it: Go does not get it.
				p := start(t, k, append(append([]string{"run"}, c.flags...), c.arg, "--",
					"sh", "-c", "echo started; exec sleep 60")...)
				p.waitOutput(t, "started", time.Minute)
				err := gormlock.Session(db, c.key, func(context.Context) error {
					t.Errorf("Session ran while the command held the lock")
					return nil
				}, c.opts...)
				if !errors.Is(err, ormlock.ErrNotAcquired) {
					t.Errorf("Session: %v, want ErrNotAcquired", err)
				}
				err = gormlock.Transaction(db, c.key, func(*gorm.DB) error {
					t.Errorf("Transaction ran while the command held the lock")
					return nil
				}, c.opts...)
				if !errors.Is(err, ormlock.ErrNotAcquired) {
					t.Errorf("Transaction: %v, want ErrNotAcquired", err)
				}
				h, err := gormlock.Holder(db, c.key, c.opts...)
				if err != nil || !h.Held {
					t.Errorf("Holder: %v, %v", h, err)
				}
				// ormlock holder says the same.
				code, out, stderr = runBin(t, k, append(append([]string{"holder"}, c.flags...), c.arg)...)
				want(t, code, stderr, 0)
				if !strings.HasPrefix(out, "held pid=") {
					t.Errorf("ormlock holder: %q", out)
				}
				if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				want(t, p.wait(t, time.Minute), p.stderr.String(), 128+int(syscall.SIGTERM))
				code, out, stderr = runBin(t, k, append(append([]string{"holder"}, c.flags...), c.arg)...)
				want(t, code, stderr, 0)
				if out != "free\n" {
					t.Errorf("ormlock holder after the run: %q", out)
				}
			})
		}
	})
}

// way is one way of taking a lock: hold runs body while key is held;
// excluded reports whether it cannot take key now (and fails the test on
// any other outcome).
type way struct {
	hold     func(t *testing.T, key string, body func())
	excluded func(t *testing.T, key string) bool
}

// A key held through any of gormlock, entlock, sqllock, pgxlock
// (PostgreSQL), the ormlock command or the documented raw SQL excludes all
// the others, on every server. The kinds run in parallel: each has a
// database of its own.
func TestEveryWayExcludesEveryOther(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		t.Parallel()
		ways := goWays(t, k)
		ways["raw SQL"] = way{
			hold: func(t *testing.T, key string, body func()) {
				release := testdb.RawHold(t, k, "", key)
				defer release()
				body()
			},
			excluded: func(t *testing.T, key string) bool { return !testdb.RawFree(t, k, "", key) },
		}
		ways["ormlock run"] = way{
			hold: func(t *testing.T, key string, body func()) {
				p := start(t, k, "run", "--keepalive", "200ms", key, "--", "sh", "-c", "echo started; exec sleep 60")
				p.waitOutput(t, "started", time.Minute)
				body()
				if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				p.wait(t, time.Minute)
			},
			excluded: func(t *testing.T, key string) bool {
				code, out, stderr := runBin(t, k, "run", key, "--", "echo", "ran")
				switch {
				case code == 75 && out == "":
					return true
				case code == 0:
					return false
				}
				t.Errorf("ormlock run: exit status %d, stdout %q, stderr:\n%s", code, out, stderr)
				return false
			},
		}
		names := make([]string, 0, len(ways))
		for n := range ways {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, h := range names {
			key := uniq(t, "every-"+h)
			ways[h].hold(t, key, func() {
				for _, o := range names {
					if o != h && !ways[o].excluded(t, key) {
						t.Errorf("%s holds %q, and %s took it too", h, key, o)
					}
				}
			})
			for _, o := range names {
				if !ways[o].excluded(t, key) {
					continue
				}
				t.Errorf("%s cannot take %q after %s released it", o, key, h)
			}
		}
	})
}

// goWays are the adapters' Transactions on the server of kind k.
func goWays(t *testing.T, k testdb.Kind) map[string]way {
	t.Helper()
	ctx := context.Background()
	// excludedBy runs one try-once call and reports whether it was refused.
	excludedBy := func(t *testing.T, name string, err error) bool {
		switch {
		case errors.Is(err, ormlock.ErrNotAcquired):
			return true
		case errors.Is(err, errRan):
			return false
		}
		t.Errorf("%s: %v", name, err)
		return false
	}
	gdb := openGorm(t, k)
	client, _ := enttest.Open(t, k)
	sdb := testdb.Open(t, k)
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, sdb) })
	ways := map[string]way{
		"gormlock": {
			hold: func(t *testing.T, key string, body func()) {
				must(t, gormlock.Transaction(gdb, key, func(*gorm.DB) error { body(); return nil }))
			},
			excluded: func(t *testing.T, key string) bool {
				return excludedBy(t, "gormlock", gormlock.Transaction(gdb, key, func(*gorm.DB) error { return errRan }))
			},
		},
		"entlock": {
			hold: func(t *testing.T, key string, body func()) {
				must(t, entlock.Transaction(ctx, client, key, func(*ent.Tx) error { body(); return nil }))
			},
			excluded: func(t *testing.T, key string) bool {
				return excludedBy(t, "entlock", entlock.Transaction(ctx, client, key, func(*ent.Tx) error { return errRan }))
			},
		},
		"sqllock": {
			hold: func(t *testing.T, key string, body func()) {
				must(t, sqllock.Transaction(ctx, sdb, key, func(context.Context, *sql.Tx) error { body(); return nil }))
			},
			excluded: func(t *testing.T, key string) bool {
				return excludedBy(t, "sqllock", sqllock.Transaction(ctx, sdb, key, func(context.Context, *sql.Tx) error { return errRan }))
			},
		},
	}
	if k.Dialect() == "postgres" {
		pool, err := pgxpool.New(ctx, testdb.DSN(t, k))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		ways["pgxlock"] = way{
			hold: func(t *testing.T, key string, body func()) {
				must(t, pgxlock.Transaction(ctx, pool, key, func(context.Context, pgx.Tx) error { body(); return nil }))
			},
			excluded: func(t *testing.T, key string) bool {
				return excludedBy(t, "pgxlock", pgxlock.Transaction(ctx, pool, key, func(context.Context, pgx.Tx) error { return errRan }))
			},
		}
	}
	return ways
}

// errRan is what a probe's fn returns: it ran, so the lock was free.
var errRan = fmt.Errorf("fn ran")

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
