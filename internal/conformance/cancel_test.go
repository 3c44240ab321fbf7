package conformance_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/leakcheck"
)

// A verb called with a context that has already ended sends nothing: no
// connection is taken from the pool and the server is not asked about its
// locks. A lock verb returns an error wrapping ormlock.ErrNotAcquired and
// the context's error; Runs, Prune, Migrate and Holder return the context's
// error. The same verb called at once with a live context on the same pool
// then succeeds (the lock verbs acquire): the ended call left nothing held,
// behind PgBouncer too.
func TestConformanceEndedContext(t *testing.T) {
	leakcheck.Goroutines(t)
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		tbl := testdb.Table(t, k, "ectx")
		shutdown := errors.New("shutting down")
		for _, ended := range []struct {
			name string
			ctx  func() context.Context
			want error
			also error // the cause, when the context has one of its own
		}{
			{"cancelled", func() context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx
			}, context.Canceled, nil},
			{"cancelled with a cause", func() context.Context {
				ctx, cancel := context.WithCancelCause(context.Background())
				cancel(shutdown)
				return ctx
			}, context.Canceled, shutdown},
			{"deadline passed", func() context.Context {
				ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
				t.Cleanup(cancel)
				return ctx
			}, context.DeadlineExceeded, nil},
		} {
			t.Run(ended.name, func(t *testing.T) {
				for _, v := range sweepVerbs(t, tbl) {
					t.Run(v.name, func(t *testing.T) {
						r, checkouts := countedRunner(t, a, k)
						var ran atomic.Bool
						err := v.call(ended.ctx(), r, &ran)
						if ran.Load() {
							t.Errorf("fn ran on an ended context")
						}
						switch {
						case !errors.Is(err, ended.want):
							t.Errorf("on an ended context: %v, want the context's error (%v)", err, ended.want)
						case ended.also != nil && !errors.Is(err, ended.also):
							t.Errorf("on an ended context: %v, want its cause (%v) too", err, ended.also)
						case v.lock && !errors.Is(err, ormlock.ErrNotAcquired):
							t.Errorf("on an ended context: %v, want ErrNotAcquired too", err)
						case !v.lock && errors.Is(err, ormlock.ErrNotAcquired):
							t.Errorf("on an ended context: %v, want the context's error, not ErrNotAcquired", err)
						}
						if n := checkouts(); n != 0 {
							t.Errorf("on an ended context: %d connection(s) taken from the pool, want none", n)
						}
						ran.Store(false)
						if err := v.call(context.Background(), r, &ran); err != nil {
							t.Fatalf("at once on a live context: %v", err)
						}
						if v.fn && !ran.Load() {
							t.Fatal("at once on a live context: fn did not run")
						}
					})
				}
			})
		}
	})
}

// sweepVerb is one call of one verb through a runner.
type sweepVerb struct {
	name string
	// lock: the verb takes a lock for the caller (an ended context is
	// ErrNotAcquired); fn: it runs fn when it succeeds.
	lock, fn bool
	// call calls the verb on ctx; fn, if the verb has one, sets ran.
	call func(ctx context.Context, r runner, ran *atomic.Bool) error
}

// sweepVerbs returns every verb of the runners, with the ledger table tbl
// (Migrate first, so that the live calls after it find the table). Each
// call has keys, jobs and slots of its own (per test name), so that a live
// call succeeds once per test.
func sweepVerbs(t *testing.T, tbl string) []sweepVerb {
	t.Helper()
	hourly, err := ormlock.Every(time.Hour, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	lt := ormlock.WithLedgerTable(tbl)
	// own names per subtest: several subtests share tbl
	name := func(verb string) string { return fmt.Sprintf("%s/%s", t.Name(), verb) }
	slot := time.Date(2031, 2, 3, 4, 0, 0, 0, time.UTC)
	return []sweepVerb{
		{"Migrate", false, false, func(ctx context.Context, r runner, _ *atomic.Bool) error {
			return r.Migrate(ctx, lt)
		}},
		{"Transaction", true, true, func(ctx context.Context, r runner, ran *atomic.Bool) error {
			return r.Transaction(ctx, name("tx"), func(txn) error { ran.Store(true); return nil })
		}},
		{"Session", true, true, func(ctx context.Context, r runner, ran *atomic.Bool) error {
			return r.Session(ctx, name("session"), func(context.Context) error { ran.Store(true); return nil })
		}},
		{"Lead", true, true, func(ctx context.Context, r runner, ran *atomic.Bool) error {
			return r.(leader).Lead(ctx, name("lead"), func(context.Context) error { ran.Store(true); return nil })
		}},
		{"RunOnce", true, true, func(ctx context.Context, r runner, ran *atomic.Bool) error {
			return r.RunOnce(ctx, name("runonce"), slot, func(txn) error { ran.Store(true); return nil }, lt)
		}},
		{"RunOnce claim", true, true, func(ctx context.Context, r runner, ran *atomic.Bool) error {
			return r.RunOnce(ctx, name("claim"), slot, func(txn) error { ran.Store(true); return nil }, lt, ormlock.WithClaim())
		}},
		{"RunScheduled", true, true, func(ctx context.Context, r runner, ran *atomic.Bool) error {
			return r.RunScheduled(ctx, name("scheduled"), hourly, func(txn) error { ran.Store(true); return nil }, lt)
		}},
		{"RunScheduled claim", true, true, func(ctx context.Context, r runner, ran *atomic.Bool) error {
			return r.RunScheduled(ctx, name("scheduled-claim"), hourly, func(txn) error { ran.Store(true); return nil }, lt, ormlock.WithClaim())
		}},
		{"Runs", false, false, func(ctx context.Context, r runner, _ *atomic.Bool) error {
			_, err := r.Runs(ctx, name("runonce"), 10, lt)
			return err
		}},
		{"Prune", false, false, func(ctx context.Context, r runner, _ *atomic.Bool) error {
			_, err := r.Prune(ctx, 10*365*24*time.Hour, lt)
			return err
		}},
		{"Holder", false, false, func(ctx context.Context, r runner, _ *atomic.Bool) error {
			_, err := r.Holder(ctx, name("tx"))
			return err
		}},
	}
}

// countedRunner opens adapter a on a new pool of its own to the shared
// server of kind k, one that has never connected, and returns it with a
// count of the connections taken from that pool since (new connections
// dialled, for database/sql: the pool keeps none idle; acquisitions, for a
// pgx pool). The pool is checked for leaks when the test ends.
func countedRunner(t *testing.T, a adapter, k testdb.Kind) (runner, func() int64) {
	t.Helper()
	dsn := testdb.DSN(t, k)
	if a.name == "pgxlock" {
		if k.Dialect() != "postgres" {
			t.Skip("pgxlock is PostgreSQL only")
		}
		ps := newPgxPools(t, dsn)
		t.Cleanup(func() { testdb.AssertNoLeaks(t, k, ps.db) })
		return pgxLocker{pools: ps}, ps.acquires
	}
	probe, err := sql.Open(k.Driver(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	dc, ok := probe.Driver().(driver.DriverContext)
	if !ok {
		t.Fatalf("driver %T has no connector", probe.Driver())
	}
	c, err := dc.OpenConnector(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cc := &countingConnector{Connector: c}
	db := sql.OpenDB(cc)
	// every checkout dials: a connection given back is closed
	db.SetMaxIdleConns(0)
	t.Cleanup(func() { db.Close() })
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
	return a.on(t, k.Dialect(), db), cc.n.Load
}

// countingConnector counts the connections it dials.
type countingConnector struct {
	driver.Connector
	n atomic.Int64
}

func (c *countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	c.n.Add(1)
	return c.Connector.Connect(ctx)
}

// acquires counts the connections acquired from ps's pools.
func (ps *pgxPools) acquires() int64 {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var n int64
	for _, p := range ps.pools {
		n += p.Stat().AcquireCount() + p.Stat().CanceledAcquireCount()
	}
	return n
}

// A verb cancelled while it waits for a lock that another holder has
// (WithWait) leaves nothing behind once it has returned: when the other
// holder releases, the key is free at once for a fresh caller, and the
// cancelled waiter never takes it, behind PgBouncer too. (A wait cut by
// closing its connection lives on in the server until the server notices,
// and can take the lock then, for nobody.)
func TestConformanceCancelledWait(t *testing.T) {
	leakcheck.Goroutines(t)
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r, tbl := openWithLedger(t, a, k)
		lt := ormlock.WithLedgerTable(tbl)
		slot := time.Date(2031, 2, 3, 4, 0, 0, 0, time.UTC)
		wait := ormlock.WithWait(30 * time.Second)
		for _, v := range []struct {
			name string
			key  string // the lock's name, held by the other holder
			call func(ctx context.Context, ran *atomic.Bool) error
		}{
			{"Transaction", "cw-tx-" + t.Name(), func(ctx context.Context, ran *atomic.Bool) error {
				return r.Transaction(ctx, "cw-tx-"+t.Name(), func(txn) error { ran.Store(true); return nil }, wait)
			}},
			{"Session", "cw-session-" + t.Name(), func(ctx context.Context, ran *atomic.Bool) error {
				return r.Session(ctx, "cw-session-"+t.Name(), func(context.Context) error { ran.Store(true); return nil }, wait)
			}},
			{"Lead", "cw-lead-" + t.Name(), func(ctx context.Context, ran *atomic.Bool) error {
				return r.(leader).Lead(ctx, "cw-lead-"+t.Name(), func(context.Context) error { ran.Store(true); return nil })
			}},
			{"RunOnce", ormlock.RunKey("cw-runonce-"+t.Name(), slot).String(), func(ctx context.Context, ran *atomic.Bool) error {
				return r.RunOnce(ctx, "cw-runonce-"+t.Name(), slot, func(txn) error { ran.Store(true); return nil }, lt, wait)
			}},
			{"RunOnce claim", ormlock.RunKey("cw-claim-"+t.Name(), slot).String(), func(ctx context.Context, ran *atomic.Bool) error {
				return r.RunOnce(ctx, "cw-claim-"+t.Name(), slot, func(txn) error { ran.Store(true); return nil }, lt, wait, ormlock.WithClaim())
			}},
			{"Migrate", "ormlock.migrate:" + tbl, func(ctx context.Context, _ *atomic.Bool) error {
				return r.Migrate(ctx, lt)
			}},
		} {
			t.Run(v.name, func(t *testing.T) {
				for round := range 3 {
					release := testdb.RawHold(t, k, "", v.key)
					ctx, cancel := context.WithCancel(context.Background())
					time.AfterFunc(time.Duration(150+50*round)*time.Millisecond, cancel)
					var ran atomic.Bool
					err := v.call(ctx, &ran)
					cancel()
					if ran.Load() {
						t.Fatalf("round %d: fn ran while another holder held the lock", round)
					}
					if !errors.Is(err, context.Canceled) {
						t.Fatalf("round %d: cancelled while waiting: %v, want context.Canceled", round, err)
					}
					release()
					if !free(t, k, v.key) {
						t.Fatalf("round %d: %s", round, fmt.Sprintf("the lock was taken after the other holder released it: the cancelled %s still waited in the server", v.name))
					}
				}
			})
		}
	})
}
