package schedtest_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/robfig/cron/v3"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/entsched"
	"github.com/ormlock/ormlock/scheduler/gormsched"
	"github.com/ormlock/ormlock/scheduler/pgxsched"
	"github.com/ormlock/ormlock/scheduler/sqlsched"
)

// otherBackend is a backend beside gormsched: the servers it runs on, and
// how to open it there (on a pool of its own, checked for leaks when the
// test ends). inUse, when set, counts the connections its pool lends out.
type otherBackend struct {
	name  string
	kinds []testdb.Kind
	open  func(t *testing.T, k testdb.Kind) (b func(...ormlock.Option) scheduler.Backend, inUse func() int)
}

var otherBackends = []otherBackend{
	{"ent", testdb.Kinds(), func(t *testing.T, k testdb.Kind) (func(...ormlock.Option) scheduler.Backend, func() int) {
		client, _ := enttest.Open(t, k)
		return func(o ...ormlock.Option) scheduler.Backend { return entsched.Backend(client, o...) }, nil
	}},
	{"sql", testdb.Kinds(), func(t *testing.T, k testdb.Kind) (func(...ormlock.Option) scheduler.Backend, func() int) {
		db := testdb.Open(t, k)
		t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
		return func(o ...ormlock.Option) scheduler.Backend { return sqlsched.Backend(db, o...) },
			func() int { return db.Stats().InUse }
	}},
	{"pgx", []testdb.Kind{testdb.Postgres, testdb.PgBouncer}, func(t *testing.T, k testdb.Kind) (func(...ormlock.Option) scheduler.Backend, func() int) {
		pool := pgxPool(t, k)
		return func(o ...ormlock.Option) scheduler.Backend { return pgxsched.Backend(pool, o...) },
			func() int { return int(pool.Stat().AcquiredConns()) }
	}},
}

// Every backend shares locks and ledger rows with the GORM one: a replica
// on it and a replica on GORM run each slot once between them, and elect
// one leader between them; its job gets the slot in its context, and runs
// outside any transaction (its pool lends the lock's connection only).
func TestBackends(t *testing.T) {
	for _, ob := range otherBackends {
		t.Run(ob.name, func(t *testing.T) {
			t.Parallel()
			forKinds(t, ob.kinds, func(t *testing.T, k testdb.Kind) { testBackend(t, k, ob) })
		})
	}
}

func testBackend(t *testing.T, k testdb.Kind, ob otherBackend) {
	ctx := context.Background()
	job := jobName(t)
	other, inUse := ob.open(t, k)
	db := openMigrated(t, k)
	now := func() time.Time { return time.Date(2031, 5, 6, 10, 0, 0, 0, time.UTC) }
	otherLocker, err := scheduler.NewLocker(other(ormlock.WithOwner(ob.name)), everySecond(t), scheduler.WithClock(now))
	if err != nil {
		t.Fatal(err)
	}
	gormLocker, err := scheduler.NewLocker(gormsched.Backend(db, ormlock.WithOwner("gorm")), everySecond(t), scheduler.WithClock(now))
	if err != nil {
		t.Fatal(err)
	}
	held, err := otherLocker.Lock(ctx, job)
	if err != nil {
		t.Fatalf("%s Lock: %v", ob.name, err)
	}
	if _, err := gormLocker.Lock(ctx, job); !errors.Is(err, ormlock.ErrNotAcquired) {
		t.Fatalf("gorm Lock while %s runs: %v", ob.name, err)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatalf("%s Unlock: %v", ob.name, err)
	}
	if _, err := gormLocker.Lock(ctx, job); !errors.Is(err, ormlock.ErrAlreadyDone) {
		t.Fatalf("gorm Lock after the %s run: %v", ob.name, err)
	}

	// robfig/cron wrapper: a JobFunc's error marks the slot failed; the
	// job runs under its lock's context (held, its slot, the hook's mark)
	// and holds no transaction while it runs
	var handled errs
	w, err := scheduler.JobWrapper(other(ormlock.WithHook(markHook{})), job, everySecond(t),
		scheduler.WithClock(func() time.Time { return now().Add(time.Second) }), scheduler.WithErrorHandler(handled.handle))
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	w(scheduler.JobFunc(func(ctx context.Context) error {
		if v := see(ctx); !v.held || !v.slotOK || !v.slot.Equal(now().Add(time.Second)) || v.mark == nil || !v.mark.slot.Equal(v.slot) {
			t.Errorf("the JobFunc's context: %+v (mark %+v), want the lock's", v, v.mark)
		}
		if inUse != nil {
			if n := inUse(); n != 1 {
				t.Errorf("%d connections in use while the job runs, want 1 (the lock's)", n)
			}
		}
		return boom
	})).Run()
	w(cron.FuncJob(func() {})).Run()
	runs, err := gormlock.Runs(db, job, 10)
	if err != nil || len(runs) != 2 || runs[0].Status != "done" || runs[1].Owner != ob.name {
		t.Fatalf("ledger: %+v, %v", runs, err)
	}
	if got := handled.get(); len(got) != 1 || !errors.Is(got[0], boom) {
		t.Fatalf("error handler got %v", got)
	}

	// a gocron task wrapped by Locker.Task: the same context
	tl, err := scheduler.NewLocker(other(ormlock.WithHook(markHook{})), everySecond(t),
		scheduler.WithClock(func() time.Time { return now().Add(3 * time.Second) }))
	if err != nil {
		t.Fatal(err)
	}
	var v seen
	task := tl.Task(job, func(ctx context.Context) error { v = see(ctx); return nil })
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tlock, err := tl.Lock(gctx, job)
	if err != nil {
		t.Fatal(err)
	}
	if err := task(gctx); err != nil {
		t.Fatal(err)
	}
	if err := tlock.Unlock(gctx); err != nil {
		t.Fatal(err)
	}
	if !v.held || !v.slot.Equal(now().Add(3*time.Second)) || v.mark == nil || v.mark.job != job || !v.mark.slot.Equal(v.slot) {
		t.Errorf("the wrapped task's context: %+v (mark %+v), want the lock's", v, v.mark)
	}

	// leader election across the two backends
	key := "leader:" + job
	otherElector, err := scheduler.NewElector(other(), key, scheduler.WithRetry(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer otherElector.Close()
	gormElector, err := scheduler.NewElector(gormsched.Backend(db), key, scheduler.WithRetry(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer gormElector.Close()
	if otherElector.IsLeader(ctx) != nil || !errors.Is(gormElector.IsLeader(ctx), scheduler.ErrNotLeader) {
		t.Fatalf("the %s elector, first, should lead", ob.name)
	}
	_ = otherElector.Close()
	if lead := waitOneLeader(t, []*scheduler.Elector{nil, gormElector}, 3*time.Second); lead != 1 {
		t.Fatalf("leader %d", lead)
	}
	_ = gormElector.Close()
}

func TestBackendsBadInput(t *testing.T) {
	s, _ := ormlock.Every(time.Minute, nil)
	var client *nilClient
	for name, b := range map[string]scheduler.Backend{
		"nil ent client":    entsched.Backend(client),
		"nil *sql.DB":       sqlsched.Backend(nil),
		"nil *pgxpool.Pool": pgxsched.Backend(nil),
		"bad sql option":    sqlsched.Backend(new(sql.DB), ormlock.WithLedgerTable("x; drop")),
		"bad pgx option":    pgxsched.Backend(&pgxpool.Pool{}, ormlock.WithLedgerTable("x; drop")),
	} {
		if _, err := scheduler.NewLocker(b, s); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// nilClient has the shape of a generated ent client.
type nilClient struct{}

func (*nilClient) Tx(context.Context) (*fakeTx, error) { return nil, errors.New("unused") }

type fakeTx struct{}

func (*fakeTx) Commit() error   { return nil }
func (*fakeTx) Rollback() error { return nil }

// pgxPool opens a pgx pool on the server of kind k, closed when the test
// ends, after a check that no lock and none of its connections is held.
func pgxPool(t *testing.T, k testdb.Kind) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), testdb.DSN(t, k))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	t.Cleanup(func() {
		testdb.AssertNoLeaks(t, k)
		// a connection is handed back to the pool by the goroutine that
		// ends its use: give it the leak check's 5 s, as the server's
		// locks are given
		for until := time.Now().Add(5 * time.Second); pool.Stat().AcquiredConns() != 0 && time.Now().Before(until); {
			time.Sleep(10 * time.Millisecond)
		}
		if n := pool.Stat().AcquiredConns(); n != 0 {
			t.Errorf("%d connection(s) of the pool still acquired", n)
		}
	})
	return pool
}
