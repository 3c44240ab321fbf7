package conformance_test

// The move from advisory (named) locks to leases (docs/MIGRATING.md, From
// advisory locks to leases): the two mechanisms do not exclude each other,
// so a rolling deploy goes through a dual-lock phase in which the
// replicas being moved take both, the advisory lock first (fenced, as
// before) and the lease inside it, and write with the lease's epoch:
//
//	phase 1: every replica advisory              (old)
//	phase 2: old replicas + dual replicas        (exclude by the advisory lock)
//	phase 3: dual replicas + lease-only replicas (exclude by the lease)
//	phase 4: every replica on the lease
//
// and fencing tokens keep growing across the move: a lease's epoch is
// drawn above the key's advisory fence counter and raises it (one
// sequence), so a resource fenced under the advisory locks refuses the
// old holders' writes after the first lease holder's, and an old
// replica's token after a dual one's epoch is above it.

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
	"github.com/ormlock/ormlock/sqllock"
)

// replica is how one replica of a fleet takes key and runs fn, handing it
// the fencing token it writes with.
type replica func(ctx context.Context, db *sql.DB, key string, fn func(tok int64) error) error

// The three kinds of replica of a move from advisory locks to leases.
var (
	// advisoryReplica is the old code: the advisory lock, fenced.
	advisoryReplica replica = func(ctx context.Context, db *sql.DB, key string, fn func(int64) error) error {
		return sqllock.Session(ctx, db, key, func(ctx context.Context) error {
			tok, _ := ormlock.FencingToken(ctx)
			return fn(tok)
		}, ormlock.WithFencing())
	}
	// dualReplica is the code of the dual-lock phase: the advisory lock
	// first (fenced, as the old code), then the lease inside it; fn
	// writes with the lease's epoch. While the advisory lock is held no
	// old replica draws a token, so the epoch is drawn above every one of
	// theirs, and the grant raises the key's counter to it before fn
	// runs, so their next token is above it.
	dualReplica replica = func(ctx context.Context, db *sql.DB, key string, fn func(int64) error) error {
		return sqllock.Session(ctx, db, key, func(ctx context.Context) error {
			return sqllock.Session(ctx, db, key, func(ctx context.Context) error {
				tok, _ := ormlock.FencingToken(ctx)
				return fn(tok)
			}, ormlock.WithLease(lossTTL))
		}, ormlock.WithFencing())
	}
	// leaseReplica is the new code: the lease only.
	leaseReplica replica = func(ctx context.Context, db *sql.DB, key string, fn func(int64) error) error {
		return sqllock.Session(ctx, db, key, func(ctx context.Context) error {
			tok, _ := ormlock.FencingToken(ctx)
			return fn(tok)
		}, ormlock.WithLease(lossTTL))
	}
)

// fleet runs two replicas of kinds a and b, two clients each, taking key
// again and again for d; it returns the most holders inside fn at once
// and checks every token handed out is above every token before it (the
// resource's fence never refuses a current holder, and refuses every
// earlier one: two holders with one token would both pass "fence <=
// token").
func fleet(t *testing.T, db *sql.DB, f fenced, key string, d time.Duration, a, b replica) int64 {
	t.Helper()
	var (
		holders testdb.Holders
		wg      sync.WaitGroup
		grants  atomic.Int64
		end     = time.Now().Add(d)
		mu      sync.Mutex
		last    int64
	)
	for _, r := range []replica{a, b, a, b} {
		wg.Go(func() {
			for time.Now().Before(end) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := r(ctx, db, key, func(tok int64) error {
					defer holders.Enter()()
					grants.Add(1)
					mu.Lock()
					if tok <= last {
						t.Errorf("token %d handed out after token %d: not above every earlier token", tok, last)
					}
					last = max(last, tok)
					mu.Unlock()
					// the fenced write: refused when an earlier holder's
					// token is above this one's
					if err := f.write(tok); err != nil {
						t.Errorf("fenced write with token %d: %v", tok, err)
					}
					time.Sleep(5 * time.Millisecond)
					return nil
				})
				cancel()
				if err != nil && !errors.Is(err, ormlock.ErrNotAcquired) {
					t.Errorf("replica: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if grants.Load() == 0 {
		t.Errorf("no client was granted %q in %v", key, d)
	}
	return holders.Max()
}

// TestLeaseMigration: a fleet moved from advisory locks to leases through
// the dual-lock phase, on every server: each phase excludes (at most one
// holder at once) and its fenced writes all pass (tokens keep growing
// across the mechanisms), while an advisory-only and a lease-only replica
// together would not exclude (why the dual phase exists).
func TestLeaseMigration(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := testdb.Open(t, k)
		db.SetMaxOpenConns(20)
		admin := testdb.AdminDB(t, k)
		if err := sqllock.Migrate(context.Background(), db); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		f := newFenced(t, k, admin)
		key := "lease-migration-" + string(k)
		const span = 1500 * time.Millisecond
		for _, p := range []struct {
			name string
			a, b replica
		}{
			{"phase 1: advisory", advisoryReplica, advisoryReplica},
			{"phase 2: advisory and dual", advisoryReplica, dualReplica},
			{"phase 3: dual and lease", dualReplica, leaseReplica},
			{"phase 4: lease", leaseReplica, leaseReplica},
		} {
			if most := fleet(t, db, f, key, span, p.a, p.b); most > 1 {
				t.Errorf("%s: %d holders at once", p.name, most)
			}
		}
		// an advisory-only replica and a lease-only one both hold the key
		// at once: the mechanisms exclude nobody of the other
		both := 0
		err := advisoryReplica(context.Background(), db, key, func(int64) error {
			return leaseReplica(context.Background(), db, key, func(int64) error { both++; return nil })
		})
		if err != nil || both != 1 {
			t.Errorf("advisory then lease of one key, nested: %v (inner ran %d times), want both granted: they are different locks", err, both)
		}
		testdb.AssertNoLeaks(t, k, db)
	})
}

// TestLeaseFirstEpochAboveAdvisoryFence: a key fenced under advisory locks
// (WithFencing) then taken as a lease: the lease's first epoch is above
// every advisory token of the key, so the resource refuses the last
// advisory holder's writes after the lease holder's.
func TestLeaseFirstEpochAboveAdvisoryFence(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := testdb.Open(t, k)
		admin := testdb.AdminDB(t, k)
		if err := sqllock.Migrate(context.Background(), db); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		f := newFenced(t, k, admin)
		key := "lease-first-epoch-" + string(k)
		var last int64
		for range 5 {
			if err := advisoryReplica(context.Background(), db, key, func(tok int64) error {
				last = tok
				return f.write(tok)
			}); err != nil {
				t.Fatal(err)
			}
		}
		var epoch int64
		if err := leaseReplica(context.Background(), db, key, func(tok int64) error {
			epoch = tok
			return f.write(tok)
		}); err != nil {
			t.Fatal(err)
		}
		t.Logf("figure: %s: advisory tokens up to %d, the lease's first epoch %d", k, last, epoch)
		if epoch <= last {
			t.Errorf("the lease's first epoch %d is not above the advisory fence %d", epoch, last)
		}
		if err := f.write(last); !errors.Is(err, ormlock.ErrStaleToken) {
			t.Errorf("the last advisory holder's write after the lease holder's: %v, want ErrStaleToken", err)
		}
		testdb.AssertNoLeaks(t, k, db)
	})
}
