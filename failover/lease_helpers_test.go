package failover_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/holding"
	"github.com/ormlock/ormlock/sqllock"
)

// leaseVerb is one verb (or shape) that holds a lease, run by sqllock:
// its key from a base name, and the most holders it admits at once.
type leaseVerb struct {
	name string
	max  int64
	run  func(ctx context.Context, db *sql.DB, base string, fn func(ctx context.Context) error, opts ...ormlock.Option) error
}

// leaseVerbs are every verb and shape that holds a lease: Session, Lead
// (one term, resigned when fn returns), Transaction, All of three keys,
// Semaphore of 2 and Shared (readers only here; readers and writers
// together in testSharedLease).
var leaseVerbs = []leaseVerb{
	{"Session", 1, func(ctx context.Context, db *sql.DB, base string, fn func(context.Context) error, opts ...ormlock.Option) error {
		return sqllock.Session(ctx, db, base, fn, opts...)
	}},
	{"Lead", 1, func(ctx context.Context, db *sql.DB, base string, fn func(context.Context) error, opts ...ormlock.Option) error {
		// Lead campaigns until ctx ends: give it the wait only.
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		err := sqllock.Lead(ctx, db, base, fn, opts...)
		if errors.Is(err, context.DeadlineExceeded) {
			return ormlock.ErrNotAcquired
		}
		return err
	}},
	{"Transaction", 1, func(ctx context.Context, db *sql.DB, base string, fn func(context.Context) error, opts ...ormlock.Option) error {
		return sqllock.Transaction(ctx, db, base, func(ctx context.Context, _ *sql.Tx) error { return fn(ctx) }, opts...)
	}},
	{"All", 1, func(ctx context.Context, db *sql.DB, base string, fn func(context.Context) error, opts ...ormlock.Option) error {
		return sqllock.Session(ctx, db, ormlock.All(base+"-c", base+"-a", base+"-b"), fn, opts...)
	}},
	{"Semaphore", 2, func(ctx context.Context, db *sql.DB, base string, fn func(context.Context) error, opts ...ormlock.Option) error {
		return sqllock.Session(ctx, db, ormlock.Semaphore(base, 2), fn, opts...)
	}},
}

// contend runs workers clients of verb v on each pool in dbs, each taking
// key base again and again for the span d (a wait of wait each time),
// holding it for hold inside fn; it returns the most holders seen inside
// fn at once and the acquisitions of each pool. An error other than
// ErrNotAcquired fails t.
func contend(t *testing.T, v leaseVerb, dbs []*sql.DB, workers int, base string, d, hold time.Duration, opts ...ormlock.Option) (int64, []int) {
	t.Helper()
	var (
		holders testdb.Holders
		wg      sync.WaitGroup
		got     = make([]atomic.Int64, len(dbs))
		end     = time.Now().Add(d)
	)
	for i, db := range dbs {
		for range workers {
			wg.Go(func() {
				for time.Now().Before(end) {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					err := v.run(ctx, db, base, func(context.Context) error {
						defer holders.Enter()()
						got[i].Add(1)
						time.Sleep(hold)
						return nil
					}, opts...)
					cancel()
					if err != nil && !errors.Is(err, ormlock.ErrNotAcquired) {
						t.Errorf("%s on pool %d: %v", v.name, i+1, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	n := make([]int, len(dbs))
	for i := range got {
		n[i] = int(got[i].Load())
	}
	return holders.Max(), n
}

// hold starts a Session of key on db with opts and waits until fn runs.
func hold(t *testing.T, db *sql.DB, key string, opts ...ormlock.Option) *holding.Holding {
	t.Helper()
	return holding.Start(t, db, key, opts...)
}

// waitLost waits up to d for h to learn of the loss, then for its Session
// to return, and checks both say ErrLockLost.
func waitLost(t *testing.T, h *holding.Holding, what string, d time.Duration) {
	t.Helper()
	h.WaitCancelled(t, what, d)
	h.WaitReturned(t, what, 30*time.Second)
}

// epochOf takes key once in a Session on db with opts (waiting as opts
// say) and returns its epoch and when it was granted.
func epochOf(t *testing.T, db *sql.DB, key string, opts ...ormlock.Option) (int64, time.Time, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		tok int64
		at  time.Time
	)
	err := sqllock.Session(ctx, db, key, func(ctx context.Context) error {
		at = time.Now()
		tok, _ = ormlock.FencingToken(ctx)
		return nil
	}, opts...)
	return tok, at, err
}

// fencedTable makes table (id, fence, v) with one row id 1, fence 0, on
// db, for fenced writes (CheckFenced).
func fencedTable(t *testing.T, db *sql.DB, table string) {
	t.Helper()
	if _, err := db.Exec("CREATE TABLE " + table + " (id int PRIMARY KEY, fence bigint NOT NULL DEFAULT 0, v int NOT NULL DEFAULT 0)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO " + table + " (id) VALUES (1)"); err != nil {
		t.Fatal(err)
	}
}

// fencedWrite writes row 1 of table under token tok (placeholders of
// dialect) and returns CheckFenced's verdict.
func fencedWrite(db *sql.DB, dialect, table string, tok int64) error {
	q := "UPDATE " + table + " SET v = v + 1, fence = ? WHERE id = 1 AND fence <= ?"
	if dialect == "postgres" {
		q = "UPDATE " + table + " SET v = v + 1, fence = $1 WHERE id = 1 AND fence <= $1"
		return sqllock.CheckFenced(db.Exec(q, tok))
	}
	return sqllock.CheckFenced(db.Exec(q, tok, tok))
}
