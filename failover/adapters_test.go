package failover_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	entsql "entgo.io/ent/dialect/sql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent"
	"github.com/ormlock/ormlock/internal/testdb/gormtest"
	"github.com/ormlock/ormlock/pgxlock"
)

// TestPGFailoverAdapters: the Session and Transaction of gormlock, entlock
// and pgxlock, mid-fn when the primary is stopped at once and its standby
// promoted, learn of the loss as sqllock's do (TestPGSyncFailover): the
// Session's ctx ends with cause ErrLockLost within two keepalives, the
// Transaction returns ErrLockLost or ErrCommitUnknown, never nil.
func TestPGFailoverAdapters(t *testing.T) {
	topology(t)
	r := testdb.StartPGReplication(t, false)
	sqlDB := openFront(t, r)
	gdb := gormtest.On(t, "postgres", sqlDB)
	client := ent.NewClient(ent.Driver(entlock.Wrap(entsql.OpenDB("postgres", sqlDB))))
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, r.FrontDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ka := ormlock.WithKeepalive(keepalive)

	type result struct {
		cause error // Session: fn's ctx cause
		err   error
		at    time.Time
	}
	var (
		mu      sync.Mutex
		results = map[string]*result{}
		ready   sync.WaitGroup
		done    sync.WaitGroup
		release = make(chan struct{})
	)
	session := func(name string, run func(fn func(ctx context.Context) error) error) {
		ready.Add(1)
		done.Go(func() {
			res := &result{}
			res.err = run(func(ctx context.Context) error {
				ready.Done()
				<-ctx.Done()
				res.cause, res.at = context.Cause(ctx), time.Now()
				return ctx.Err()
			})
			mu.Lock()
			results[name] = res
			mu.Unlock()
		})
	}
	transaction := func(name string, run func(wait func()) error) {
		ready.Add(1)
		done.Go(func() {
			res := &result{}
			res.err = run(func() { ready.Done(); <-release })
			res.at = time.Now()
			mu.Lock()
			results[name] = res
			mu.Unlock()
		})
	}
	session("gormlock.Session", func(fn func(context.Context) error) error {
		return gormlock.Session(gdb, "ad-gorm-s", fn, ka)
	})
	session("entlock.Session", func(fn func(context.Context) error) error {
		return entlock.Session(ctx, client, "ad-ent-s", fn, ka)
	})
	session("pgxlock.Session", func(fn func(context.Context) error) error {
		return pgxlock.Session(ctx, pool, "ad-pgx-s", fn, ka)
	})
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	transaction("gormlock.Transaction", func(wait func()) error {
		return gormlock.Transaction(gdb.WithContext(tctx), "ad-gorm-t", func(*gorm.DB) error { wait(); return nil })
	})
	transaction("entlock.Transaction", func(wait func()) error {
		return entlock.Transaction(tctx, client, "ad-ent-t", func(*ent.Tx) error { wait(); return nil })
	})
	transaction("pgxlock.Transaction", func(wait func()) error {
		return pgxlock.Transaction(tctx, pool, "ad-pgx-t", func(context.Context, pgx.Tx) error { wait(); return nil })
	})
	waitGroup(t, &ready, 30*time.Second, "holders in fn")
	start := time.Now()
	r.Primary.StopImmediate(t)
	r.Promote(t)
	r.SwitchFront()
	close(release)
	waitGroup(t, &done, 60*time.Second, "holders to return")
	for name, res := range results {
		took := res.at.Sub(start)
		t.Logf("figure: %s learnt the loss after %v: %v", name, took.Round(time.Millisecond), res.err)
		if res.err == nil {
			t.Errorf("%s returned nil after its primary was stopped", name)
		}
		if strings.HasSuffix(name, ".Session") {
			if !errors.Is(res.cause, ormlock.ErrLockLost) {
				t.Errorf("%s: ctx cause %v, want ErrLockLost", name, res.cause)
			}
			if took > 2*keepalive+500*time.Millisecond {
				t.Errorf("%s learnt the loss after %v, want within two keepalives", name, took)
			}
		} else if !errors.Is(res.err, ormlock.ErrLockLost) && !errors.Is(res.err, ormlock.ErrCommitUnknown) {
			t.Errorf("%s: %v, want ErrLockLost or ErrCommitUnknown", name, res.err)
		}
	}
}
