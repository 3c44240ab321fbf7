package conformance_test

// Cross-ORM conformance: one suite, written once against a small adapter
// interface, run for every adapter (gormlock, entlock) on every server
// (PostgreSQL, PgBouncer in transaction mode, MariaDB); then gormlock,
// entlock and hand-written SQL contend for the same keys and must exclude
// each other. Every pool is checked for leaks (no advisory or named lock
// left, no connection in use) when its test ends.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	entsql "entgo.io/ent/dialect/sql"
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent"
	"github.com/ormlock/ormlock/internal/testdb/gormtest"
)

func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }

// locker is what the suite needs of an adapter: the two verbs, over one pool.
type locker interface {
	// Transaction runs fn in a transaction while key's lock is held.
	Transaction(ctx context.Context, key any, fn func(tx txn) error, opts ...ormlock.Option) error
	// Session holds key's lock on a dedicated connection while fn runs.
	Session(ctx context.Context, key any, fn func(ctx context.Context) error, opts ...ormlock.Option) error
}

// txn is a transaction handed to fn.
type txn interface {
	// Insert writes an item row in the transaction.
	Insert(owner string, n int) error
	// Exec runs a statement (placeholders "?") in the transaction.
	Exec(query string, args ...any) error
	// Scan runs a query returning one row in the transaction into dest.
	Scan(query string, dest ...any) error
	// Context is the context fn's statements run with.
	Context() context.Context
	// FencingToken is the adapter's FencingToken of the transaction.
	FencingToken() (int64, bool)
}

// queryInt runs a query returning one integer in tx (tx.Scan).
func queryInt(tx txn, query string) (int64, error) {
	var n int64
	err := tx.Scan(query, &n)
	return n, err
}

// adapter opens a locker on a new pool of kind k; the pool is checked for
// leaks when the test ends.
type adapter struct {
	name string
	open func(t *testing.T, k testdb.Kind) locker
	// with opens a runner like open whose defaults are opts (GORM's plugin,
	// entlock.Wrap's options).
	with func(t *testing.T, k testdb.Kind, opts ...ormlock.Option) runner
	// on builds a runner over pool db of dialect ("postgres" or "mysql"),
	// without pinging it and without a leak check.
	on func(t *testing.T, dialect string, db *sql.DB) runner
}

var adapters = []adapter{
	{"gormlock", openGorm, gormWith, gormOnPool},
	{"entlock", openEnt, entWith, entOnPool},
	{"sqllock", openSQL, sqlWith, sqlOnPool},
	{"sqllock-wrapped", openSQLWrapped, sqlWrappedWith, sqlWrappedOnPool},
	{"pgxlock", openPgx, pgxWith, pgxOnPool},
}

// ---- gormlock ----

type gormLocker struct{ db *gorm.DB }

type gormTx struct{ tx *gorm.DB }

func (g gormTx) Insert(owner string, n int) error {
	return g.tx.Exec("INSERT INTO items (owner, n) VALUES (?, ?)", owner, n).Error
}

func openGorm(t *testing.T, k testdb.Kind) locker {
	t.Helper()
	return gormLocker{gormOpen(t, k)}
}

func gormWith(t *testing.T, k testdb.Kind, opts ...ormlock.Option) runner {
	t.Helper()
	db := gormOpen(t, k)
	if len(opts) > 0 {
		if err := db.Use(gormlock.New(opts...)); err != nil {
			t.Fatalf("gormlock.New: %v", err)
		}
	}
	return gormLocker{db}
}

func gormOnPool(t *testing.T, dialect string, sqlDB *sql.DB) runner {
	t.Helper()
	return gormLocker{gormtest.On(t, dialect, sqlDB, gormtest.NoPing())}
}

// gormOpen opens GORM on a new pool to the server of kind k, with the items
// table migrated; the pool is checked for leaks when the test ends.
func gormOpen(t *testing.T, k testdb.Kind) *gorm.DB {
	t.Helper()
	enttest.Migrate(t, k)
	db, _ := gormtest.Open(t, k)
	return db
}

func (g gormLocker) Transaction(ctx context.Context, key any, fn func(txn) error, opts ...ormlock.Option) error {
	return gormlock.Transaction(g.db.WithContext(ctx), keyOf(key), gormFn(fn), opts...)
}

// gormFn adapts fn to GORM (nil stays nil, for the bad-input tests).
func gormFn(fn func(txn) error) func(*gorm.DB) error {
	if fn == nil {
		return nil
	}
	return func(tx *gorm.DB) error { return fn(gormTx{tx}) }
}

func (g gormLocker) Session(ctx context.Context, key any, fn func(context.Context) error, opts ...ormlock.Option) error {
	return gormlock.Session(g.db.WithContext(ctx), keyOf(key), fn, opts...)
}

// ---- entlock ----

type entLocker struct {
	client  *ent.Client
	db      *sql.DB
	dialect string
}

type entTx struct {
	ctx context.Context
	tx  *ent.Tx
}

func (e entTx) Insert(owner string, n int) error {
	return e.tx.Item.Create().SetOwner(owner).SetN(n).Exec(e.ctx)
}

func openEnt(t *testing.T, k testdb.Kind) locker {
	t.Helper()
	return entWith(t, k)
}

func entWith(t *testing.T, k testdb.Kind, opts ...ormlock.Option) runner {
	t.Helper()
	client, db := enttest.Open(t, k, opts...)
	return entLocker{client, db, k.Dialect()}
}

func entOnPool(t *testing.T, dialect string, db *sql.DB) runner {
	t.Helper()
	return entLocker{ent.NewClient(ent.Driver(entlock.Wrap(entsql.OpenDB(dialect, db)))), db, dialect}
}

func (e entLocker) Transaction(ctx context.Context, key any, fn func(txn) error, opts ...ormlock.Option) error {
	return entlock.Transaction(ctx, e.client, keyOf(key), entFn(ctx, fn), opts...)
}

// entFn adapts fn to ent (nil stays nil, for the bad-input tests).
func entFn(ctx context.Context, fn func(txn) error) func(*ent.Tx) error {
	if fn == nil {
		return nil
	}
	return func(tx *ent.Tx) error { return fn(entTx{ctx, tx}) }
}

func (e entLocker) Session(ctx context.Context, key any, fn func(context.Context) error, opts ...ormlock.Option) error {
	return entlock.Session(ctx, e.client, keyOf(key), fn, opts...)
}

// ---- helpers ----

// keyOf is the key the adapters' verbs take for key (a name, an id or a
// Key), as they convert it themselves.
func keyOf(key any) ormlock.Key {
	switch v := key.(type) {
	case string:
		return ormlock.Name(v)
	case int64:
		return ormlock.ID(v)
	case ormlock.Key:
		return v
	}
	panic(fmt.Sprintf("key of type %T", key))
}

// forEach runs f for every adapter on every server kind. The kinds of one
// adapter run in parallel: each has a database of its own, whose leak check
// does not see the others'; the adapters run one after the other.
func forEach(t *testing.T, f func(t *testing.T, a adapter, k testdb.Kind)) {
	t.Helper()
	forKinds(t, testdb.Kinds(), f)
}

// forEachPostgres runs f for every adapter on PostgreSQL and PgBouncer, as
// forEach does.
func forEachPostgres(t *testing.T, f func(t *testing.T, a adapter, k testdb.Kind)) {
	t.Helper()
	forKinds(t, []testdb.Kind{testdb.Postgres, testdb.PgBouncer}, f)
}

func forKinds(t *testing.T, kinds []testdb.Kind, f func(t *testing.T, a adapter, k testdb.Kind)) {
	t.Helper()
	forKindsOf(t, adapters, func(a adapter) string { return a.name }, kinds, f)
}

// forKindsOf runs f for every one of items (named by name) on every kind
// of kinds: the kinds of one item in parallel, the items one after the
// other.
func forKindsOf[T any](t *testing.T, items []T, name func(T) string, kinds []testdb.Kind, f func(t *testing.T, item T, k testdb.Kind)) {
	t.Helper()
	for _, it := range items {
		t.Run(name(it), func(t *testing.T) {
			for _, k := range kinds {
				t.Run(string(k), func(t *testing.T) {
					t.Parallel()
					f(t, it, k)
				})
			}
		})
	}
}

// forEachPostgresInTurn is forEachPostgres one case after the other, for a
// test that changes a setting of the PostgreSQL server both kinds reach
// (the statement log).
func forEachPostgresInTurn(t *testing.T, f func(t *testing.T, a adapter, k testdb.Kind)) {
	t.Helper()
	for _, a := range adapters {
		for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
			t.Run(a.name+"/"+string(k), func(t *testing.T) { f(t, a, k) })
		}
	}
}

// free reports whether hand-written SQL can take key's lock right now.
func free(t *testing.T, k testdb.Kind, key string) bool {
	t.Helper()
	return testdb.RawFree(t, k, "", key)
}

// settled fails the test unless owner has want rows and key is free, after
// what (a commit, a rollback).
func settled(t *testing.T, k testdb.Kind, owner, key string, want int, after string) {
	t.Helper()
	if n := enttest.Count(t, k, owner); n != want {
		t.Fatalf("%d rows after %s, want %d", n, after, want)
	}
	if !free(t, k, key) {
		t.Fatalf("lock held after %s", after)
	}
}

// exclusion runs rounds of lockers contending for key and asserts at most
// one holder inside fn at any instant, and that someone wins every round.
func exclusion(t *testing.T, k testdb.Kind, owner, key string, lockers []locker, rounds int) {
	t.Helper()
	ctx := context.Background()
	var in testdb.Holders
	var wins, losses atomic.Int64
	for r := 0; r < rounds; r++ {
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, len(lockers))
		for i, l := range lockers {
			wg.Go(func() {
				<-start
				errs[i] = l.Transaction(ctx, key, func(tx txn) error {
					defer in.Enter()()
					time.Sleep(time.Millisecond)
					return tx.Insert(owner, r)
				})
			})
		}
		close(start)
		wg.Wait()
		roundWins := 0
		for i, err := range errs {
			switch {
			case err == nil:
				roundWins++
				wins.Add(1)
			case errors.Is(err, ormlock.ErrNotAcquired):
				losses.Add(1)
			default:
				t.Fatalf("round %d, locker %d: unexpected error: %v", r, i, err)
			}
		}
		if roundWins == 0 {
			t.Fatalf("round %d: nobody acquired a free lock", r)
		}
	}
	if got := in.Max(); got != 1 {
		t.Fatalf("max holders inside fn at once = %d, want 1", got)
	}
	if losses.Load() == 0 {
		t.Fatalf("no contention in %d rounds: the test did not exercise exclusion", rounds)
	}
	if n := enttest.Count(t, k, owner); n != int(wins.Load()) {
		t.Fatalf("%d rows committed, want one per win (%d)", n, wins.Load())
	}
	t.Logf("%d rounds: %d wins, %d ErrNotAcquired", rounds, wins.Load(), losses.Load())
}

// ---- the conformance suite ----

func TestConformanceMutualExclusion(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		lockers := []locker{a.open(t, k), a.open(t, k), a.open(t, k)}
		exclusion(t, k, enttest.Owner(t, k), "conf-mutex-"+t.Name(), lockers, 100)
	})
}

func TestConformanceFnError(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		l := a.open(t, k)
		ctx := context.Background()
		owner, key := enttest.Owner(t, k), "conf-err-"+t.Name()
		boom := errors.New("boom")
		err := l.Transaction(ctx, key, func(tx txn) error {
			if err := tx.Insert(owner, 1); err != nil {
				return err
			}
			return boom
		})
		if err != boom {
			t.Fatalf("err = %v, want fn's error unchanged", err)
		}
		settled(t, k, owner, key, 0, "fn failed")
		if err := l.Transaction(ctx, key, func(tx txn) error { return tx.Insert(owner, 2) }); err != nil {
			t.Fatal(err)
		}
		settled(t, k, owner, key, 1, "commit")
	})
}

func TestConformancePanic(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		l := a.open(t, k)
		owner, key := enttest.Owner(t, k), "conf-panic-"+t.Name()
		var got any
		func() {
			defer func() { got = recover() }()
			_ = l.Transaction(context.Background(), key, func(tx txn) error {
				if err := tx.Insert(owner, 1); err != nil {
					t.Error(err)
				}
				panic("kaboom")
			})
		}()
		if got != "kaboom" {
			t.Fatalf("recovered %v, want the original panic", got)
		}
		settled(t, k, owner, key, 0, "panic")
	})
}

func TestConformanceWaitAndCancel(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		l := a.open(t, k)
		key := "conf-wait-" + t.Name()
		release := testdb.RawHold(t, k, "", key)
		called := false
		fn := func(txn) error { called = true; return nil }
		ctx := context.Background()

		if err := l.Transaction(ctx, key, fn); !errors.Is(err, ormlock.ErrNotAcquired) {
			t.Fatalf("try-once: %v, want ErrNotAcquired", err)
		}
		if err := l.Transaction(ctx, key, fn, ormlock.WithWait(200*time.Millisecond)); !errors.Is(err, ormlock.ErrNotAcquired) {
			t.Fatalf("wait: %v, want ErrNotAcquired", err)
		}
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(200*time.Millisecond, cancel)
		if err := l.Transaction(cctx, key, fn, ormlock.WithWait(30*time.Second)); !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancel: %v, want ErrNotAcquired and context.Canceled", err)
		}
		dctx, dcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer dcancel()
		if err := l.Transaction(dctx, key, fn, ormlock.WithWait(30*time.Second)); !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("deadline: %v, want ErrNotAcquired and context.DeadlineExceeded", err)
		}
		if called {
			t.Fatal("fn called without the lock")
		}
		time.AfterFunc(100*time.Millisecond, release)
		if err := l.Transaction(ctx, key, fn, ormlock.WithWait(30*time.Second)); err != nil || !called {
			t.Fatalf("wait for release: err=%v called=%v", err, called)
		}
	})
}

func TestConformanceCancelInsideFn(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		l := a.open(t, k)
		owner, key := enttest.Owner(t, k), "conf-cancelfn-"+t.Name()
		ctx, cancel := context.WithCancel(context.Background())
		err := l.Transaction(ctx, key, func(tx txn) error {
			cancel()
			return tx.Insert(owner, 1)
		})
		if err == nil {
			t.Fatal("want an error after the context was cancelled inside fn")
		}
		if n := enttest.Count(t, k, owner); n != 0 {
			t.Fatalf("%d rows committed after cancel, want 0", n)
		}
		// gormlock on PostgreSQL: database/sql rolls the cancelled
		// transaction back on its own goroutine, so the lock may outlive
		// the call by a moment; poll rather than demand it at once.
		start := time.Now()
		for !free(t, k, key) {
			if time.Since(start) > 5*time.Second {
				t.Fatal("lock still held 5s after the cancelled call returned")
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("lock free %v after return", time.Since(start))
	})
}

// The lock is held until fn returns, even when ctx ends while fn runs: fn
// may still be doing work the lock protects.
func TestConformanceHeldUntilFnReturns(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		l := a.open(t, k)
		key := "conf-heldfn-" + t.Name()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		_ = l.Transaction(ctx, key, func(txn) error {
			cancel()
			time.Sleep(100 * time.Millisecond) // database/sql reacts to ctx at once
			if free(t, k, key) {
				t.Error("lock free while fn still runs")
			}
			return nil
		})
	})
}

func TestConformanceSession(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		l, other := a.open(t, k), a.open(t, k)
		key := "conf-session-" + t.Name()
		ctx := context.Background()
		err := l.Session(ctx, key, func(ctx context.Context) error {
			if free(t, k, key) {
				return errors.New("raw SQL took the lock during the Session")
			}
			return other.Transaction(ctx, key, func(txn) error { return errors.New("fn called") })
		}, ormlock.WithKeepalive(100*time.Millisecond))
		if !errors.Is(err, ormlock.ErrNotAcquired) {
			t.Fatalf("Transaction during Session: %v, want ErrNotAcquired", err)
		}
		if !free(t, k, key) {
			t.Fatal("lock held after Session")
		}
	})
}

// runner is what the RunOnce, Holder and observer suites need of an
// adapter, on top of locker: gormlock and entlock implement it (the
// hand-written SQL locker does not).
type runner interface {
	locker
	// RunOnce runs fn at most once per (job, slot).
	RunOnce(ctx context.Context, job string, slot time.Time, fn func(tx txn) error, opts ...ormlock.Option) error
	// RunScheduled runs fn at most once per slot of schedule at the current
	// time.
	RunScheduled(ctx context.Context, job string, schedule ormlock.Schedule, fn func(tx txn) error, opts ...ormlock.Option) error
	// Migrate creates the ledger table.
	Migrate(ctx context.Context, opts ...ormlock.Option) error
	// Runs reads the ledger of job.
	Runs(ctx context.Context, job string, limit int, opts ...ormlock.Option) ([]ormlock.Run, error)
	// Holder asks who holds key.
	Holder(ctx context.Context, key any, opts ...ormlock.Option) (ormlock.HolderInfo, error)
	// Pool is the adapter's database/sql pool.
	Pool() *sql.DB
	// Prune deletes the ledger's finished rows older than olderThan.
	Prune(ctx context.Context, olderThan time.Duration, opts ...ormlock.Option) (int64, error)
	// AdvanceFences moves every fencing counter of the namespace by by.
	AdvanceFences(ctx context.Context, by int64, opts ...ormlock.Option) (int64, error)
	// PlainTx runs an empty transaction of the ORM's own, without a lock.
	PlainTx(ctx context.Context) error
}

var (
	_ runner = gormLocker{}
	_ runner = entLocker{}
)

// claimInTx reports whether the adapter runs a claim-mode fn in a
// transaction of its own (entlock, sqllock, pgxlock) rather than outside
// any transaction (gormlock): whether fn's writes are visible while it
// runs, and whether they survive fn's failure.
func claimInTx(a adapter) bool { return a.name != "gormlock" }

func (g gormLocker) RunOnce(ctx context.Context, job string, slot time.Time, fn func(txn) error, opts ...ormlock.Option) error {
	return gormlock.RunOnce(g.db.WithContext(ctx), job, slot, gormFn(fn), opts...)
}

func (g gormLocker) RunScheduled(ctx context.Context, job string, schedule ormlock.Schedule, fn func(txn) error, opts ...ormlock.Option) error {
	return gormlock.RunScheduled(g.db.WithContext(ctx), job, schedule, gormFn(fn), opts...)
}

func (e entLocker) RunScheduled(ctx context.Context, job string, schedule ormlock.Schedule, fn func(txn) error, opts ...ormlock.Option) error {
	return entlock.RunScheduled(ctx, e.client, job, schedule, entFn(ctx, fn), opts...)
}

func (g gormLocker) Migrate(ctx context.Context, opts ...ormlock.Option) error {
	return gormlock.Migrate(g.db.WithContext(ctx), opts...)
}

func (g gormLocker) Runs(ctx context.Context, job string, limit int, opts ...ormlock.Option) ([]ormlock.Run, error) {
	return gormlock.Runs(g.db.WithContext(ctx), job, limit, opts...)
}

func (g gormLocker) Holder(ctx context.Context, key any, opts ...ormlock.Option) (ormlock.HolderInfo, error) {
	return gormlock.Holder(g.db.WithContext(ctx), keyOf(key), opts...)
}

func (e entLocker) RunOnce(ctx context.Context, job string, slot time.Time, fn func(txn) error, opts ...ormlock.Option) error {
	return entlock.RunOnce(ctx, e.client, job, slot, entFn(ctx, fn), opts...)
}

func (e entLocker) Migrate(ctx context.Context, opts ...ormlock.Option) error {
	return entlock.Migrate(ctx, e.client, opts...)
}

func (e entLocker) Runs(ctx context.Context, job string, limit int, opts ...ormlock.Option) ([]ormlock.Run, error) {
	return entlock.Runs(ctx, e.client, job, limit, opts...)
}

func (e entLocker) Holder(ctx context.Context, key any, opts ...ormlock.Option) (ormlock.HolderInfo, error) {
	return entlock.Holder(ctx, e.client, keyOf(key), opts...)
}

func (g gormLocker) Pool() *sql.DB {
	db, err := g.db.DB()
	if err != nil {
		panic(err)
	}
	return db
}

func (e entLocker) Pool() *sql.DB { return e.db }

func (g gormLocker) Prune(ctx context.Context, olderThan time.Duration, opts ...ormlock.Option) (int64, error) {
	return gormlock.Prune(g.db.WithContext(ctx), olderThan, opts...)
}

func (e entLocker) Prune(ctx context.Context, olderThan time.Duration, opts ...ormlock.Option) (int64, error) {
	return entlock.Prune(ctx, e.client, olderThan, opts...)
}

func (g gormLocker) AdvanceFences(ctx context.Context, by int64, opts ...ormlock.Option) (int64, error) {
	return gormlock.AdvanceFences(g.db.WithContext(ctx), by, opts...)
}

func (e entLocker) AdvanceFences(ctx context.Context, by int64, opts ...ormlock.Option) (int64, error) {
	return entlock.AdvanceFences(ctx, e.client, by, opts...)
}

func (g gormLocker) PlainTx(ctx context.Context) error {
	return g.db.WithContext(ctx).Transaction(func(*gorm.DB) error { return nil })
}

// PlainTx runs on a client whose driver is not wrapped.
func (e entLocker) PlainTx(ctx context.Context) error {
	tx, err := ent.NewClient(ent.Driver(entsql.OpenDB(e.dialect, e.db))).Tx(ctx)
	if err != nil {
		return err
	}
	return tx.Commit()
}

func (g gormTx) FencingToken() (int64, bool) { return gormlock.FencingToken(g.tx) }
func (e entTx) FencingToken() (int64, bool)  { return entlock.FencingToken(e.tx) }
func (r rawTx) FencingToken() (int64, bool)  { return 0, false }

func (g gormTx) Context() context.Context { return g.tx.Statement.Context }
func (e entTx) Context() context.Context  { return e.ctx }
func (r rawTx) Context() context.Context  { return r.ctx }

func (g gormTx) Scan(query string, dest ...any) error { return g.tx.Raw(query).Row().Scan(dest...) }

func (e entTx) Scan(query string, dest ...any) error {
	rows, err := e.tx.QueryContext(e.ctx, query)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		return errors.Join(errors.New("no row"), rows.Err())
	}
	return errors.Join(rows.Scan(dest...), rows.Err())
}

func (r rawTx) Scan(query string, dest ...any) error {
	return r.tx.QueryRowContext(r.ctx, query).Scan(dest...)
}

func (g gormTx) Exec(query string, args ...any) error { return g.tx.Exec(query, args...).Error }

func (e entTx) Exec(query string, args ...any) error {
	_, err := e.tx.ExecContext(e.ctx, query, args...)
	return err
}

func (r rawTx) Exec(query string, args ...any) error {
	_, err := r.tx.ExecContext(r.ctx, query, args...)
	return err
}

// openRunner opens adapter a on a new pool of kind k as a runner.
func openRunner(t *testing.T, a adapter, k testdb.Kind) runner {
	t.Helper()
	return a.open(t, k).(runner)
}

// ledgerTable creates the test's own ledger table (and its fence table)
// through r and drops both after the test.
func ledgerTable(t *testing.T, k testdb.Kind, r runner) string {
	t.Helper()
	name := testdb.Table(t, k, "c")
	if err := r.Migrate(context.Background(), ormlock.WithLedgerTable(name)); err != nil {
		t.Fatalf("Migrate(%s): %v", name, err)
	}
	return name
}

// openWithLedger opens a's runner on a new pool of kind k (openRunner) and
// creates the test's own ledger table with its Migrate (ledgerTable).
func openWithLedger(t *testing.T, a adapter, k testdb.Kind) (runner, string) {
	t.Helper()
	r := openRunner(t, a, k)
	return r, ledgerTable(t, k, r)
}

// runsOf reads the ledger of job through r.
func runsOf(t *testing.T, r runner, tbl, job string) []ormlock.Run {
	t.Helper()
	rs, err := r.Runs(context.Background(), job, 1000, ormlock.WithLedgerTable(tbl))
	if err != nil {
		t.Fatalf("Runs: %v", err)
	}
	return rs
}
