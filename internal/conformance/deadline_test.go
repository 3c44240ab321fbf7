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
	"github.com/ormlock/ormlock/internal/faults"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
	"github.com/ormlock/ormlock/internal/testdb/leakcheck"
)

// grace is how long after its deadline a call may return: a lock wait
// on a server that stopped answering is cut lockproto's deadlineGrace (2 s)
// after the deadline, so a little more than that.
const grace = 2*time.Second + 500*time.Millisecond

// verb is one verb of an adapter, called with a trivial fn.
type verb struct {
	name string
	call func(ctx context.Context, r runner, key string) error
}

// verbs are the verbs a deadline must bound; ledger is RunOnce's table.
func verbs(ledger string) []verb {
	nop := func(txn) error { return nil }
	return []verb{
		{"Transaction", func(ctx context.Context, r runner, key string) error { return r.Transaction(ctx, key, nop) }},
		{"TransactionWait", func(ctx context.Context, r runner, key string) error {
			return r.Transaction(ctx, key, nop, ormlock.WithWait(time.Minute))
		}},
		{"RunOnce", func(ctx context.Context, r runner, key string) error {
			return r.RunOnce(ctx, key, testdb.Slot(0), nop, ormlock.WithLedgerTable(ledger), ormlock.WithWait(time.Minute))
		}},
		{"RunOnceClaim", func(ctx context.Context, r runner, key string) error {
			return r.RunOnce(ctx, key, testdb.Slot(0), nop, ormlock.WithLedgerTable(ledger), ormlock.WithClaim(), ormlock.WithWait(time.Minute))
		}},
		{"Session", func(ctx context.Context, r runner, key string) error {
			return r.Session(ctx, key, func(context.Context) error { return nil }, ormlock.WithWait(time.Minute))
		}},
	}
}

// notAcquiredByDeadline calls v with a deadline and checks that it returns
// within the deadline plus grace, with an error matching both
// ErrNotAcquired and context.DeadlineExceeded.
func notAcquiredByDeadline(t *testing.T, r runner, v verb, key string, deadline time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	err := v.call(ctx, r, key)
	faults.Within(t, v.name, start, deadline+grace)
	if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%s: %v, want ErrNotAcquired and DeadlineExceeded", v.name, err)
	}
}

// The pool's only connection is held elsewhere: every verb gives up at the
// caller's deadline, before the lock.
func TestDeadlinePoolExhausted(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		ledger := ledgerTable(t, k, r)
		r.Pool().SetMaxOpenConns(1)
		conn, err := r.Pool().Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range verbs(ledger) {
			notAcquiredByDeadline(t, r, v, "pool-"+t.Name()+v.name, 300*time.Millisecond)
		}
		_ = conn.Close()
	})
}

// A server that accepts TCP connections and never answers: the dial is cut
// by the deadline and classified as not acquired. The cases touch no real
// server and run in parallel.
func TestDeadlineSilentServer(t *testing.T) {
	for _, a := range adapters {
		for _, dialect := range []string{"postgres", "mysql"} {
			t.Run(a.name+"/"+dialect, func(t *testing.T) {
				t.Parallel()
				addr := faults.Silent(t)
				driver, dsn := "pgx", "postgres://u:p@"+addr+"/db?sslmode=disable"
				if dialect == "mysql" {
					driver, dsn = "mysql", "u:p@tcp("+addr+")/db"
				}
				db, err := sql.Open(driver, dsn)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = db.Close() })
				r := a.on(t, dialect, db)
				for _, v := range verbs("ormlock_runs") {
					notAcquiredByDeadline(t, r, v, "silent", time.Second)
				}
				if n := db.Stats().InUse; n != 0 {
					t.Errorf("InUse = %d after the calls", n)
				}
			})
		}
	}
}

// The backend of the pool's idle connection is frozen before the call:
// BEGIN never answers, and the deadline ends the wait.
func TestDeadlineFrozenIdleBackend(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			k := testdb.Postgres
			r := openRunner(t, a, k)
			ledger := ledgerTable(t, k, r)
			r.Pool().SetMaxIdleConns(1)
			for _, v := range verbs(ledger) {
				t.Run(v.name, func(t *testing.T) {
					resume := faults.Freeze(t, faults.PGBackendPID(t, r.Pool())) // the pool's one idle connection
					notAcquiredByDeadline(t, r, v, "frozen-"+t.Name(), time.Second)
					resume()
				})
			}
		})
	}
}

// The backend freezes while fn runs. fn returns nil before the deadline:
// the COMMIT is cut at the deadline (its outcome is unknown). fn returns
// after the deadline: the ROLLBACK is bounded and nothing is committed.
// Either way the lock is free once the backend resumes. The two kinds use
// two databases, whose leak checks do not see each other: they run in
// parallel, their cases one after the other.
func TestDeadlineFrozenDuringFn(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			deadlineFrozenDuringFn(t, k)
		})
	}
}

func deadlineFrozenDuringFn(t *testing.T, k testdb.Kind) {
	for _, a := range adapters {
		for _, iso := range []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelRepeatableRead} {
			for _, late := range []bool{false, true} {
				name := a.name + "/" + iso.String()
				if late {
					name += "/fnPastDeadline"
				}
				t.Run(name, func(t *testing.T) {
					r := openRunner(t, a, k)
					owner := enttest.Owner(t, k)
					const deadline = 2 * time.Second
					ctx, cancel := context.WithTimeout(context.Background(), deadline)
					defer cancel()
					var resume func()
					start := time.Now()
					err := r.Transaction(ctx, "frozen-fn-"+t.Name(), func(tx txn) error {
						pid, err := queryInt(tx, "SELECT pg_backend_pid()")
						if err != nil {
							return err
						}
						if err := tx.Insert(owner, 1); err != nil {
							return err
						}
						resume = faults.Freeze(t, int(pid))
						if late {
							<-ctx.Done()
						}
						return nil
					}, ormlock.WithTxOptions(&sql.TxOptions{Isolation: iso}))
					faults.Within(t, "Transaction", start, deadline+grace)
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("Transaction: %v, want DeadlineExceeded", err)
					}
					if errors.Is(err, ormlock.ErrNotAcquired) {
						t.Errorf("Transaction: %v: the lock was acquired", err)
					}
					if resume != nil {
						resume()
					}
					if late {
						if n := enttest.Count(t, k, owner); n != 0 {
							t.Errorf("rows after a rollback: %d, want 0", n)
						}
					}
				})
			}
		}
	}
}

// MariaDB freezes (SIGSTOP of the whole server) after fn's last statement,
// so the COMMIT (fn returned nil) or the ROLLBACK (fn failed) meets a
// server that does not answer: the call still returns by its deadline plus
// grace, with an error matching the context's (a COMMIT's outcome is
// unknown) or fn's own error, and once the server resumes the lock is free
// and nothing leaked. A private server, since freezing it stops every
// connection.
func TestDeadlineFrozenCommitMySQL(t *testing.T) {
	srv := testdb.Start(t, testdb.MariaDB)
	errFn := errors.New("fn failed")
	for _, c := range []struct {
		name  string
		fnErr error
	}{{"commit", nil}, {"rollback", errFn}} {
		for _, a := range adapters {
			t.Run(c.name+"/"+a.name, func(t *testing.T) {
				db, err := sql.Open("mysql", srv.DSN())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { srv.AssertNoLeaks(t, db); _ = db.Close() })
				r := a.on(t, "mysql", db)
				key := "frozen-commit-" + t.Name()
				err = frozenCall(t, "Transaction", func(ctx context.Context, freeze func()) error {
					return r.Transaction(ctx, key, func(tx txn) error {
						if _, err := queryInt(tx, "SELECT 1"); err != nil {
							return err
						}
						freeze()
						// SIGSTOP takes effect as each server thread next runs:
						// let it, or a COMMIT sent at once may still be answered
						time.Sleep(100 * time.Millisecond)
						return c.fnErr
					})
				}, func() func() { return faults.Freeze(t, srv.PID()) })
				switch {
				case c.fnErr != nil && !errors.Is(err, errFn):
					t.Fatalf("Transaction: %v, want fn's error", err)
				case c.fnErr == nil && (!errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ormlock.ErrNotAcquired)):
					t.Fatalf("Transaction: %v, want DeadlineExceeded after the lock was taken", err)
				}
				releasedAfterThaw(t, r, key)
			})
		}
	}
}

// The server stops answering while a Session's fn runs, and fn returns when
// the caller's deadline passes: the release cannot be confirmed, and the call
// still returns by the deadline plus grace (not after the release's own
// 15 s bound), with an error matching the deadline. Once the server resumes
// the lock is free and no connection leaked. On PostgreSQL the session's
// backend is frozen; on MariaDB a private server, since freezing it stops
// every connection.
func TestDeadlineFrozenSession(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name+"/postgres", func(t *testing.T) {
			r := openRunner(t, a, testdb.Postgres)
			frozenSession(t, r, "frozen-session-"+t.Name(), func() func() {
				h, err := r.Holder(context.Background(), "frozen-session-"+t.Name())
				if err != nil || !h.Held {
					t.Fatalf("Holder: %+v, %v", h, err)
				}
				return faults.Freeze(t, int(h.PID))
			})
		})
		t.Run(a.name+"/mariadb", func(t *testing.T) {
			srv := testdb.Start(t, testdb.MariaDB)
			db, err := sql.Open("mysql", srv.DSN())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.AssertNoLeaks(t, db); _ = db.Close() })
			r := a.on(t, "mysql", db)
			frozenSession(t, r, "frozen-session-"+t.Name(), func() func() { return faults.Freeze(t, srv.PID()) })
		})
	}
}

// frozenSession holds key in a Session, calls freeze in fn, and checks the
// call's timing and error, then that the lock is free once resumed.
func frozenSession(t *testing.T, r runner, key string, freeze func() (resume func())) {
	t.Helper()
	// a keepalive longer than the test: the release, not a failed check,
	// meets the frozen server
	err := frozenCall(t, "Session", func(ctx context.Context, frz func()) error {
		return r.Session(ctx, key, func(ctx context.Context) error {
			frz()
			<-ctx.Done()
			return ctx.Err()
		}, ormlock.WithKeepalive(time.Minute))
	}, freeze)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ormlock.ErrNotAcquired) {
		t.Fatalf("Session: %v, want DeadlineExceeded after the lock was taken", err)
	}
	releasedAfterThaw(t, r, key)
}

// frozenCall runs call with a deadline of 2 s; call's fn calls frz to freeze
// the server (freeze returns the resume). The call must return by the
// deadline plus grace; should it not be bounded, the server thaws in time
// for it to return and the test to fail rather than hang. The server is
// resumed before frozenCall returns call's error.
func frozenCall(t *testing.T, what string, call func(ctx context.Context, frz func()) error, freeze func() (resume func())) error {
	t.Helper()
	const deadline = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	var resume func()
	var thaw *time.Timer
	start := time.Now()
	err := call(ctx, func() {
		resume = freeze()
		thaw = time.AfterFunc(deadline+grace+5*time.Second, resume)
	})
	faults.Within(t, what, start, deadline+grace)
	if thaw != nil {
		thaw.Stop()
	}
	if resume != nil {
		resume()
	}
	return err
}

// releasedAfterThaw waits up to 10 s for key to be free once the server
// resumed.
func releasedAfterThaw(t *testing.T, r runner, key string) {
	t.Helper()
	for until := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		h, herr := r.Holder(context.Background(), key)
		if herr == nil && !h.Held {
			return
		}
		if time.Now().After(until) {
			t.Fatalf("the lock is still held after the server resumed: %+v, %v", h, herr)
		}
	}
}

// The caller's context ends while fn goes on working past the release's
// grace; on a healthy server the release still succeeds: the grace counts
// from the release, not from the end of the context.
func TestSessionReleaseLongAfterCancel(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		key := "release-after-cancel-" + t.Name()
		ctx, cancel := context.WithCancel(context.Background())
		err := r.Session(ctx, key, func(context.Context) error {
			cancel()
			time.Sleep(1500 * time.Millisecond) // longer than the grace
			return nil
		})
		if err != nil {
			t.Fatalf("Session: %v, want nil (fn succeeded and the lock was released)", err)
		}
		if h, err := r.Holder(context.Background(), key); err != nil || h.Held {
			t.Fatalf("after the Session: %+v, %v", h, err)
		}
	})
}

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
		{"AdvanceFences", false, false, func(ctx context.Context, r runner, _ *atomic.Bool) error {
			_, err := r.AdvanceFences(ctx, 1, lt, ormlock.WithNamespace(name("fences")))
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
