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
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
)

// obsRecorder is a goroutine-safe Observer that keeps every event.
type obsRecorder struct {
	mu     sync.Mutex
	events []ormlock.Event
}

func (r *obsRecorder) Observe(_ context.Context, e ormlock.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *obsRecorder) all() []ormlock.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ormlock.Event(nil), r.events...)
}

func (r *obsRecorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = nil
}

func (r *obsRecorder) count(kind ormlock.EventKind) int {
	n := 0
	for _, e := range r.all() {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

func obsKinds(es []ormlock.Event) []ormlock.EventKind {
	out := make([]ormlock.EventKind, len(es))
	for i, e := range es {
		out[i] = e.Kind
	}
	return out
}

// obsExpect checks that r saw exactly the events kinds, in order, all for
// verb on key in namespace ns on k's dialect, and returns them. Wait and
// Held must never be negative, and are zero on the events that do not
// carry them.
func obsExpect(t *testing.T, r *obsRecorder, k testdb.Kind, verb string, key ormlock.Key, ns string, kinds ...ormlock.EventKind) []ormlock.Event {
	t.Helper()
	es := r.all()
	if fmt.Sprint(obsKinds(es)) != fmt.Sprint(kinds) {
		t.Fatalf("events %v, want %v", obsKinds(es), kinds)
	}
	for _, e := range es {
		if e.Verb != verb || e.Dialect != k.Dialect() || e.Key != key || e.Namespace != ns {
			t.Errorf("%v event: verb=%q dialect=%q key=%v ns=%q, want %q %q %v %q", e.Kind, e.Verb, e.Dialect, e.Key, e.Namespace, verb, k.Dialect(), key, ns)
		}
		if e.Wait < 0 || e.Held < 0 {
			t.Errorf("%v event: negative wait %v or held %v", e.Kind, e.Wait, e.Held)
		}
		switch e.Kind {
		case ormlock.EventAcquired, ormlock.EventNotAcquired:
			if e.Held != 0 {
				t.Errorf("%v event carries held %v", e.Kind, e.Held)
			}
			if e.Wait > time.Hour {
				t.Errorf("%v event: wait %v, measured from no attempt", e.Kind, e.Wait)
			}
		case ormlock.EventReleased, ormlock.EventReleaseFailed, ormlock.EventLockLost:
			if e.Wait != 0 {
				t.Errorf("%v event carries wait %v", e.Kind, e.Wait)
			}
		default:
			if e.Wait != 0 || e.Held != 0 {
				t.Errorf("%v event carries wait %v / held %v", e.Kind, e.Wait, e.Held)
			}
		}
		switch e.Kind {
		case ormlock.EventReleaseFailed, ormlock.EventLockLost:
			if e.Err == nil {
				t.Errorf("%v event without an error", e.Kind)
			}
		case ormlock.EventNotAcquired:
		default:
			if e.Err != nil {
				t.Errorf("%v event with error %v", e.Kind, e.Err)
			}
		}
	}
	return es
}

const (
	evAttempt       = ormlock.EventAttempt
	evAcquired      = ormlock.EventAcquired
	evNotAcquired   = ormlock.EventNotAcquired
	evReleased      = ormlock.EventReleased
	evReleaseFailed = ormlock.EventReleaseFailed
	evLockLost      = ormlock.EventLockLost
)

func TestObserverTransaction(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := openGorm(t, k)
		rec := &obsRecorder{}
		obs := ormlock.WithObserver(rec)

		t.Run("acquired and released", func(t *testing.T) {
			rec.reset()
			key := "obs-ok-" + t.Name()
			var fnTook time.Duration
			err := gormlock.Transaction(db, key, func(tx *gorm.DB) error {
				start := time.Now()
				if got := obsKinds(rec.all()); fmt.Sprint(got) != fmt.Sprint([]ormlock.EventKind{evAttempt, evAcquired}) {
					return fmt.Errorf("events inside fn: %v, want attempt, acquired", got)
				}
				err := tx.Exec("SELECT 1").Error
				time.Sleep(20 * time.Millisecond)
				fnTook = time.Since(start)
				return err
			}, obs)
			if err != nil {
				t.Fatal(err)
			}
			es := obsExpect(t, rec, k, "Transaction", ormlock.Name(key), "", evAttempt, evAcquired, evReleased)
			// the hold spans fn: acquired before fn started, released after
			// it returned (both measured on the monotonic clock)
			if es[2].Held < fnTook {
				t.Errorf("held %v shorter than fn's own %v", es[2].Held, fnTook)
			}
			t.Logf("wait %v, held %v, fn %v", es[1].Wait, es[2].Held, fnTook)
		})

		t.Run("not acquired", func(t *testing.T) {
			rec.reset()
			key := "obs-held-" + t.Name()
			release := rawHold(t, k, key)
			defer release()
			err := gormlock.Transaction(db, key, func(*gorm.DB) error { return errors.New("fn called") }, obs)
			if !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Fatalf("err = %v, want ErrNotAcquired", err)
			}
			es := obsExpect(t, rec, k, "Transaction", ormlock.Name(key), "", evAttempt, evNotAcquired)
			if es[1].Err != nil {
				t.Errorf("not_acquired (held elsewhere) carries err %v", es[1].Err)
			}

			rec.reset()
			err = gormlock.Transaction(db, key, func(*gorm.DB) error { return errors.New("fn called") }, obs, ormlock.WithWait(150*time.Millisecond))
			if !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Fatalf("wait: err = %v, want ErrNotAcquired", err)
			}
			es = obsExpect(t, rec, k, "Transaction", ormlock.Name(key), "", evAttempt, evNotAcquired)
			if es[1].Err != nil {
				t.Errorf("not_acquired (wait ran out) carries err %v", es[1].Err)
			}
			t.Logf("not_acquired after a 150ms wait: wait=%v", es[1].Wait)

			rec.reset()
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
			defer cancel()
			err = gormlock.Transaction(db.WithContext(ctx), key, func(*gorm.DB) error { return errors.New("fn called") }, obs, ormlock.WithWait(time.Minute))
			if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("deadline: err = %v", err)
			}
			es = obsExpect(t, rec, k, "Transaction", ormlock.Name(key), "", evAttempt, evNotAcquired)
			if !errors.Is(es[1].Err, context.DeadlineExceeded) {
				t.Errorf("not_acquired at the context deadline carries err %v, want DeadlineExceeded", es[1].Err)
			}
		})

		t.Run("fn error", func(t *testing.T) {
			rec.reset()
			key := "obs-fnerr-" + t.Name()
			boom := errors.New("boom")
			if err := gormlock.Transaction(db, key, func(*gorm.DB) error { return boom }, obs); err != boom {
				t.Fatalf("err = %v, want fn's", err)
			}
			obsExpect(t, rec, k, "Transaction", ormlock.Name(key), "", evAttempt, evAcquired, evReleased)
		})

		t.Run("panic", func(t *testing.T) {
			rec.reset()
			key := "obs-panic-" + t.Name()
			var got any
			func() {
				defer func() { got = recover() }()
				_ = gormlock.Transaction(db, key, func(*gorm.DB) error { panic("kaboom") }, obs)
			}()
			if got != "kaboom" {
				t.Fatalf("recovered %v", got)
			}
			obsExpect(t, rec, k, "Transaction", ormlock.Name(key), "", evAttempt, evAcquired, evReleased)
			if !rawFree(t, k, key) {
				t.Fatal("lock held after panic")
			}
		})

		t.Run("namespace and key forms", func(t *testing.T) {
			rec.reset()
			id := keyhash.Int64("obs-id-" + t.Name())
			if err := gormlock.Transaction(db, id, func(*gorm.DB) error { return nil }, obs, ormlock.WithNamespace("obsns")); err != nil {
				t.Fatal(err)
			}
			obsExpect(t, rec, k, "Transaction", ormlock.ID(id), "obsns", evAttempt, evAcquired, evReleased)
		})

		t.Run("database unreachable", func(t *testing.T) {
			// a pool that cannot hand out a connection: the verb fails
			// before the lock call, and the observer still hears of it
			closed := testdb.Open(t, k)
			cdb := gormOn(t, k, closed)
			closed.Close()
			rec.reset()
			key := "obs-closed-" + t.Name()
			err := gormlock.Transaction(cdb, key, func(*gorm.DB) error { return errors.New("fn called") }, obs)
			if err == nil {
				t.Fatal("no error on a closed pool")
			}
			es := obsExpect(t, rec, k, "Transaction", ormlock.Name(key), "", evAttempt, evNotAcquired)
			if es[1].Err == nil {
				t.Errorf("not_acquired carries err %v, want the pool's error", es[1].Err)
			}
			t.Logf("closed pool: err=%v; event err=%v", err, es[1].Err)
		})

		t.Run("context already ended", func(t *testing.T) {
			// the transaction cannot even begin: still a not_acquired, and
			// the error matches both ErrNotAcquired and the context's
			rec.reset()
			key := "obs-cancelled-" + t.Name()
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			err := gormlock.Transaction(db.WithContext(ctx), key, func(*gorm.DB) error { return errors.New("fn called") }, obs)
			if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want ErrNotAcquired and context.Canceled", err)
			}
			es := obsExpect(t, rec, k, "Transaction", ormlock.Name(key), "", evAttempt, evNotAcquired)
			if !errors.Is(es[1].Err, context.Canceled) {
				t.Errorf("not_acquired carries err %v, want context.Canceled", es[1].Err)
			}
		})

		t.Run("no observer", func(t *testing.T) {
			rec.reset()
			if err := gormlock.Transaction(db, "obs-none-"+t.Name(), func(*gorm.DB) error { return nil }); err != nil {
				t.Fatal(err)
			}
			if es := rec.all(); len(es) != 0 {
				t.Fatalf("events without an observer: %v", obsKinds(es))
			}
		})
	})
}

// Many goroutines share one observer: every attempt ends in exactly one
// not_acquired or one acquired, and every acquired in exactly one released.
func TestObserverTransactionContention(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		const workers, rounds = 4, 15
		rec := &obsRecorder{}
		dbs := make([]*gorm.DB, workers)
		for i := range dbs {
			dbs[i], _ = openGorm(t, k)
		}
		key := "obs-contention-" + t.Name()
		var mu sync.Mutex
		wins, losses := 0, 0
		for range rounds {
			var wg sync.WaitGroup
			for _, db := range dbs {
				wg.Go(func() {
					err := gormlock.Transaction(db, key, func(tx *gorm.DB) error {
						time.Sleep(2 * time.Millisecond)
						return tx.Exec("SELECT 1").Error
					}, ormlock.WithObserver(rec))
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						wins++
					case errors.Is(err, ormlock.ErrNotAcquired):
						losses++
					default:
						t.Errorf("unexpected error: %v", err)
					}
				})
			}
			wg.Wait()
		}
		att, acq, rel, na := rec.count(evAttempt), rec.count(evAcquired), rec.count(evReleased), rec.count(evNotAcquired)
		t.Logf("%d calls: %d wins, %d losses; events attempt=%d acquired=%d released=%d not_acquired=%d", workers*rounds, wins, losses, att, acq, rel, na)
		if att != workers*rounds || acq != wins || rel != wins || na != losses {
			t.Fatalf("events do not match outcomes: attempt=%d acquired=%d released=%d not_acquired=%d, wins=%d losses=%d",
				att, acq, rel, na, wins, losses)
		}
		if len(rec.all()) != att+acq+rel+na {
			t.Fatalf("unexpected event kinds: %v", obsKinds(rec.all()))
		}
	})
}

func TestObserverReleaseFailureMariaDB(t *testing.T) {
	k := testdb.MariaDB
	db, _ := openGorm(t, k)
	rec := &obsRecorder{}
	key := "obs-relfail-" + t.Name()
	err := gormlock.Transaction(db, key, func(tx *gorm.DB) error {
		// release the lock behind ormlock's back: its RELEASE_LOCK then
		// returns NULL
		return tx.Exec("SELECT RELEASE_LOCK(?)", keyhash.MySQLName("", key)).Error
	}, ormlock.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	es := obsExpect(t, rec, k, "Transaction", ormlock.Name(key), "", evAttempt, evAcquired, evReleaseFailed)
	if !errors.Is(es[2].Err, lockproto.ErrNotHeld) {
		t.Errorf("release_failed err = %v, want one wrapping lockproto.ErrNotHeld", es[2].Err)
	}
	t.Logf("release_failed: held=%v err=%v", es[2].Held, es[2].Err)
}

func TestObserverPluginDefault(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := openGorm(t, k)
		plugin, perCall := &obsRecorder{}, &obsRecorder{}
		if err := db.Use(gormlock.New(ormlock.WithObserver(plugin), ormlock.WithNamespace("obsplugin"))); err != nil {
			t.Fatal(err)
		}
		key := "obs-plugin-" + t.Name()
		if err := gormlock.Transaction(db, key, func(*gorm.DB) error { return nil }); err != nil {
			t.Fatal(err)
		}
		obsExpect(t, plugin, k, "Transaction", ormlock.Name(key), "obsplugin", evAttempt, evAcquired, evReleased)

		// a per-call observer replaces the plugin's
		plugin.reset()
		if err := gormlock.Transaction(db, key, func(*gorm.DB) error { return nil }, ormlock.WithObserver(perCall)); err != nil {
			t.Fatal(err)
		}
		obsExpect(t, perCall, k, "Transaction", ormlock.Name(key), "obsplugin", evAttempt, evAcquired, evReleased)
		if es := plugin.all(); len(es) != 0 {
			t.Fatalf("plugin observer also got %v", obsKinds(es))
		}
		// and WithObserver(nil) turns it off for one call
		if err := gormlock.Transaction(db, key, func(*gorm.DB) error { return nil }, ormlock.WithObserver(nil)); err != nil {
			t.Fatal(err)
		}
		if es := plugin.all(); len(es) != 0 {
			t.Fatalf("WithObserver(nil): plugin observer got %v", obsKinds(es))
		}
	})
}

// obsKill ends the server connection id from the admin pool.
func obsKill(t *testing.T, k testdb.Kind, id int64) {
	t.Helper()
	admin := testdb.AdminDB(t, k)
	var err error
	if k.Dialect() == "postgres" {
		var ok bool
		if err = admin.QueryRow("SELECT pg_terminate_backend($1)", id).Scan(&ok); err == nil && !ok {
			err = errors.New("pg_terminate_backend returned false")
		}
	} else {
		_, err = admin.Exec(fmt.Sprintf("KILL CONNECTION %d", id))
	}
	if err != nil {
		t.Fatalf("kill %d: %v", id, err)
	}
}

// obsWaitGone waits (up to 10s) until the server connection id has ended.
func obsWaitGone(t *testing.T, k testdb.Kind, id int64) {
	t.Helper()
	q := "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?"
	if k.Dialect() == "postgres" {
		q = "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = $1"
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := testdb.AdminDB(t, k).QueryRow(q, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("connection %d still there after 10s", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The Session engineer tests Session itself; these check only its events.
func TestObserverSession(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := openGorm(t, k)
		rec := &obsRecorder{}
		obs := ormlock.WithObserver(rec)

		t.Run("acquired and released", func(t *testing.T) {
			rec.reset()
			key := "obs-sess-" + t.Name()
			err := gormlock.Session(db, key, func(ctx context.Context) error {
				if got := obsKinds(rec.all()); fmt.Sprint(got) != fmt.Sprint([]ormlock.EventKind{evAttempt, evAcquired}) {
					return fmt.Errorf("events inside fn: %v", got)
				}
				return db.WithContext(ctx).Exec("SELECT 1").Error
			}, obs)
			if err != nil {
				t.Fatal(err)
			}
			obsExpect(t, rec, k, "Session", ormlock.Name(key), "", evAttempt, evAcquired, evReleased)
		})

		t.Run("fn error", func(t *testing.T) {
			rec.reset()
			key := "obs-sess-err-" + t.Name()
			boom := errors.New("boom")
			if err := gormlock.Session(db, key, func(context.Context) error { return boom }, obs); !errors.Is(err, boom) {
				t.Fatalf("err = %v", err)
			}
			obsExpect(t, rec, k, "Session", ormlock.Name(key), "", evAttempt, evAcquired, evReleased)
		})

		t.Run("not acquired", func(t *testing.T) {
			rec.reset()
			key := "obs-sess-held-" + t.Name()
			defer rawHold(t, k, key)()
			err := gormlock.Session(db, key, func(context.Context) error { return errors.New("fn called") }, obs)
			if !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Fatalf("err = %v", err)
			}
			obsExpect(t, rec, k, "Session", ormlock.Name(key), "", evAttempt, evNotAcquired)
		})

		t.Run("lock lost", func(t *testing.T) {
			rec.reset()
			key := "obs-sess-lost-" + t.Name()
			err := gormlock.Session(db, key, func(ctx context.Context) error {
				h, err := gormlock.Holder(db, key)
				if err != nil || !h.Held {
					return fmt.Errorf("holder: %v %v", h, err)
				}
				obsKill(t, k, h.PID)
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(30 * time.Second):
					return errors.New("loss not seen within 30s")
				}
			}, obs, ormlock.WithKeepalive(100*time.Millisecond))
			if !errors.Is(err, ormlock.ErrLockLost) {
				t.Fatalf("err = %v, want ErrLockLost", err)
			}
			es := obsExpect(t, rec, k, "Session", ormlock.Name(key), "", evAttempt, evAcquired, evLockLost)
			t.Logf("lock_lost: held=%v err=%v", es[2].Held, es[2].Err)
		})

		t.Run("loss seen at release", func(t *testing.T) {
			// the keepalive never runs; the release finds the connection
			// gone and reports release_failed
			rec.reset()
			key := "obs-sess-relfail-" + t.Name()
			err := gormlock.Session(db, key, func(ctx context.Context) error {
				h, err := gormlock.Holder(db, key)
				if err != nil || !h.Held {
					return fmt.Errorf("holder: %v %v", h, err)
				}
				obsKill(t, k, h.PID)
				obsWaitGone(t, k, h.PID)
				return nil
			}, obs, ormlock.WithKeepalive(time.Hour))
			if !errors.Is(err, ormlock.ErrLockLost) {
				t.Fatalf("err = %v, want ErrLockLost", err)
			}
			es := obsExpect(t, rec, k, "Session", ormlock.Name(key), "", evAttempt, evAcquired, evReleaseFailed)
			t.Logf("release_failed: held=%v err=%v", es[2].Held, es[2].Err)
		})
	})
}

// TestObserverSlogReal feeds SlogObserver real events: one replica runs the
// job, another finds it held. Run with -v to see the lines (the README's
// "Why didn't my job run?" shows them).
func TestObserverSlogReal(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		var mu sync.Mutex
		var buf bytes.Buffer
		logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, &slog.HandlerOptions{Level: slog.LevelDebug}))
		a, _ := openGorm(t, k)
		b, _ := openGorm(t, k)
		for _, db := range []*gorm.DB{a, b} {
			if err := db.Use(gormlock.New(ormlock.WithObserver(ormlock.SlogObserver(logger)), ormlock.WithNamespace("billing"))); err != nil {
				t.Fatal(err)
			}
		}
		err := gormlock.Transaction(a, "daily-settlement-"+string(k), func(tx *gorm.DB) error {
			err := gormlock.Transaction(b, "daily-settlement-"+string(k), func(*gorm.DB) error { return errors.New("ran twice") })
			if !errors.Is(err, ormlock.ErrNotAcquired) {
				return fmt.Errorf("second replica: %v", err)
			}
			return tx.Exec("SELECT 1").Error
		})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		out := buf.String()
		mu.Unlock()
		t.Logf("slog output:\n%s", out)
		want := []string{
			`level=DEBUG msg="ormlock: attempt" verb=Transaction dialect=` + k.Dialect(),
			`level=DEBUG msg="ormlock: acquired"`,
			`level=DEBUG msg="ormlock: attempt"`,
			`level=INFO msg="ormlock: not_acquired"`,
			`level=INFO msg="ormlock: released"`,
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != len(want) {
			t.Fatalf("%d lines, want %d", len(lines), len(want))
		}
		for i, w := range want {
			if !strings.Contains(lines[i], w) || !strings.Contains(lines[i], "namespace=billing") {
				t.Errorf("line %d = %s\nwant it to contain %s and namespace=billing", i, lines[i], w)
			}
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
		op, err := lockproto.NewOp(lockproto.Postgres, "Transaction", ormlock.Name("k"), config.New(ormlock.WithObserver(c.obs)))
		if err != nil {
			t.Fatal(err)
		}
		for _, kind := range []ormlock.EventKind{evAttempt, evAcquired, evReleased} {
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
			db := gormOnTB(b, k, sqlDB)
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

// TestObserverWalkthrough is the README's "Why didn't my job run?": two
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
				db := gormOn(t, k, sqlDB)
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
