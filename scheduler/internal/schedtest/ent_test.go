package schedtest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/enttest"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/entsched"
	"github.com/ormlock/ormlock/scheduler/gormsched"
)

// The Ent backend shares locks and ledger rows with the GORM one: a replica
// on ent and a replica on GORM run each slot once between them, and elect
// one leader between them.
func TestEntBackend(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		job := jobName(t)
		client, _ := enttest.Open(t, k)
		db := openGorm(t, k)
		migrate(t, db)
		now := func() time.Time { return time.Date(2031, 5, 6, 10, 0, 0, 0, time.UTC) }
		entLocker, err := scheduler.NewLocker(entsched.Backend(client, ormlock.WithOwner("ent")), everySecond(t), scheduler.WithClock(now))
		if err != nil {
			t.Fatal(err)
		}
		gormLocker, err := scheduler.NewLocker(gormsched.Backend(db, ormlock.WithOwner("gorm")), everySecond(t), scheduler.WithClock(now))
		if err != nil {
			t.Fatal(err)
		}
		held, err := entLocker.Lock(ctx, job)
		if err != nil {
			t.Fatalf("ent Lock: %v", err)
		}
		if _, err := gormLocker.Lock(ctx, job); !errors.Is(err, ormlock.ErrNotAcquired) {
			t.Fatalf("gorm Lock while ent runs: %v", err)
		}
		if err := held.Unlock(ctx); err != nil {
			t.Fatalf("ent Unlock: %v", err)
		}
		if _, err := gormLocker.Lock(ctx, job); !errors.Is(err, ormlock.ErrAlreadyDone) {
			t.Fatalf("gorm Lock after the ent run: %v", err)
		}

		// robfig/cron wrapper on ent: a JobFunc's error marks the slot failed
		var handled errs
		w, err := scheduler.JobWrapper(entsched.Backend(client), job, everySecond(t),
			scheduler.WithClock(func() time.Time { return now().Add(time.Second) }), scheduler.WithErrorHandler(handled.handle))
		if err != nil {
			t.Fatal(err)
		}
		boom := errors.New("boom")
		w(scheduler.JobFunc(func(context.Context) error { return boom })).Run()
		w(cron.FuncJob(func() {})).Run()
		runs, err := gormlock.Runs(db, job, 10)
		if err != nil || len(runs) != 2 || runs[0].Status != "done" || runs[1].Owner != "ent" {
			t.Fatalf("ledger: %+v, %v", runs, err)
		}
		if got := handled.get(); len(got) != 1 || !errors.Is(got[0], boom) {
			t.Fatalf("error handler got %v", got)
		}

		// leader election across the two ORMs
		key := "leader:" + job
		entElector, err := scheduler.NewElector(entsched.Backend(client), key, scheduler.WithRetry(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer entElector.Close()
		gormElector, err := scheduler.NewElector(gormsched.Backend(db), key, scheduler.WithRetry(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer gormElector.Close()
		if entElector.IsLeader(ctx) != nil || !errors.Is(gormElector.IsLeader(ctx), scheduler.ErrNotLeader) {
			t.Fatal("the ent elector, first, should lead")
		}
		_ = entElector.Close()
		if lead := waitOneLeader(t, []*scheduler.Elector{nil, gormElector}, 3*time.Second); lead != 1 {
			t.Fatalf("leader %d", lead)
		}
		_ = gormElector.Close()
	})
}

func TestEntBadInput(t *testing.T) {
	s, _ := ormlock.Every(time.Minute, nil)
	var client *nilClient
	if _, err := scheduler.NewLocker(entsched.Backend(client), s); !errors.Is(err, ormlock.ErrInvalidArgument) {
		t.Fatalf("nil ent client: %v", err)
	}
}

// nilClient has the shape of a generated ent client.
type nilClient struct{}

func (*nilClient) Tx(context.Context) (*fakeTx, error) { return nil, errors.New("unused") }

type fakeTx struct{}

func (*fakeTx) Commit() error   { return nil }
func (*fakeTx) Rollback() error { return nil }
