package schedtest_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	entsql "entgo.io/ent/dialect/sql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/robfig/cron/v3"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent"
	"github.com/ormlock/ormlock/internal/testdb/gormtest"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/entsched"
	"github.com/ormlock/ormlock/scheduler/gormsched"
	"github.com/ormlock/ormlock/scheduler/pgxsched"
	"github.com/ormlock/ormlock/scheduler/sqlsched"
)

// The scheduler adapters on a PostgreSQL hot standby, on every backend: a
// gocron Locker's Lock, an Elector and a robfig/cron JobWrapper are refused
// with ErrUnsupportedDialect naming the standby (the Elector and the
// wrapper through the error handler), and the job never runs.
func TestStandbyRefusedSchedulers(t *testing.T) {
	primary := testdb.Start(t, testdb.Postgres)
	standby := primary.StartStandby(t)
	sqlDB := func(t *testing.T) *sql.DB {
		db, err := sql.Open("pgx", standby.DSN())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		t.Cleanup(func() { standby.AssertNoLeaks(t, db) })
		return db
	}
	backends := []struct {
		name string
		open func(t *testing.T) scheduler.Backend
	}{
		{"gorm", func(t *testing.T) scheduler.Backend {
			return gormsched.Backend(gormtest.On(t, "postgres", sqlDB(t), gormtest.NoPing()))
		}},
		{"ent", func(t *testing.T) scheduler.Backend {
			client := ent.NewClient(ent.Driver(entlock.Wrap(entsql.OpenDB("postgres", sqlDB(t)))))
			return entsched.Backend(client)
		}},
		{"sql", func(t *testing.T) scheduler.Backend { return sqlsched.Backend(sqlDB(t)) }},
		{"pgx", func(t *testing.T) scheduler.Backend {
			pool, err := pgxpool.New(context.Background(), standby.DSN())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			return pgxsched.Backend(pool)
		}},
	}
	refused := func(t *testing.T, what string, err error) {
		t.Helper()
		if !errors.Is(err, ormlock.ErrUnsupportedDialect) || !strings.Contains(err.Error(), "hot standby") {
			t.Errorf("%s on a standby: %v; want ErrUnsupportedDialect naming the hot standby", what, err)
		}
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			job := jobName(t)
			t.Run("Locker", func(t *testing.T) {
				l, err := scheduler.NewLocker(b.open(t), everyHour(t), scheduler.WithErrorHandler(func(error) {}))
				if err != nil {
					t.Fatal(err)
				}
				held, err := l.Lock(context.Background(), job)
				if err == nil {
					_ = held.Unlock(context.Background())
				}
				refused(t, "Lock", err)
			})
			t.Run("Elector", func(t *testing.T) {
				var handled errs
				e, err := scheduler.NewElector(b.open(t), job, scheduler.WithErrorHandler(handled.handle))
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				if err := e.IsLeader(context.Background()); err == nil {
					t.Error("IsLeader on a standby: nil, want not the leader")
				}
				deadline := time.Now().Add(10 * time.Second)
				for len(handled.get()) == 0 && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				if got := handled.get(); len(got) == 0 {
					t.Error("Elector on a standby: nothing reported")
				} else {
					refused(t, "Elector", got[0])
				}
			})
			t.Run("JobWrapper", func(t *testing.T) {
				var handled errs
				wrap, err := scheduler.JobWrapper(b.open(t), job, everyHour(t), scheduler.WithErrorHandler(handled.handle))
				if err != nil {
					t.Fatal(err)
				}
				var ran atomic.Bool
				wrap(cron.FuncJob(func() { ran.Store(true) })).Run()
				if ran.Load() {
					t.Error("the job ran on a standby")
				}
				if got := handled.get(); len(got) != 1 {
					t.Errorf("JobWrapper on a standby reported %v, want the refusal", got)
				} else {
					refused(t, "JobWrapper", got[0])
				}
			})
		})
	}
}
