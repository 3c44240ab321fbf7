package conformance_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
	"github.com/ormlock/ormlock/internal/testdb/leakcheck"
	"github.com/ormlock/ormlock/sqllock"
)

// leaseOpts migrates the test's ledger (and fence) table and the test's
// lease table through r, and returns the options of a lease of ttl on
// them.
func leaseOpts(t *testing.T, k testdb.Kind, r runner, ttl time.Duration) []ormlock.Option {
	t.Helper()
	ledgerName := ledgerTable(t, k, r)
	leases := testdb.Table(t, k, "lease")
	opts := []ormlock.Option{ormlock.WithLedgerTable(ledgerName), ormlock.WithLeaseTable(leases)}
	if err := r.Migrate(context.Background(), opts...); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return slices.Clip(append(opts, ormlock.WithLease(ttl))) // appended to by each caller on its own
}

// leaseTableOf is the lease table leaseOpts made.
func leaseTableOf(t *testing.T, k testdb.Kind) string { return testdb.TableName(t, "lease") }

// liveLeases counts the rows of table whose lease has not expired by the
// server's clock.
func liveLeases(t *testing.T, k testdb.Kind, table string) int {
	t.Helper()
	now := "clock_timestamp()"
	if k.Dialect() == "mysql" {
		now = "UTC_TIMESTAMP(6)"
	}
	var n int
	if err := testdb.AdminDB(t, k).QueryRow("SELECT COUNT(*) FROM " + table + " WHERE expires_at > " + now).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// tokens checks that the fencing tokens fn sees grow strictly from one
// holder to the next.
type tokens struct {
	mu   sync.Mutex
	last int64
	bad  []string
}

func (s *tokens) seeToken(tok int64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ok || tok <= s.last {
		s.bad = append(s.bad, "token "+itoa(tok)+" after "+itoa(s.last))
	}
	s.last = max(s.last, tok)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Sessions and Transactions of three instances contend for one key held
// as a lease, round after round: at most one holder inside fn at any
// instant, someone wins every round, every holder's token (its epoch) is
// greater than the one before, and nothing is left after the release.
func TestLeaseExclusion(t *testing.T) {
	leakcheck.Goroutines(t)
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		const instances, rounds = 3, 12
		r := openRunner(t, a, k)
		opts := leaseOpts(t, k, r, 5*time.Second)
		ls := make([]runner, instances)
		ls[0] = r
		for i := 1; i < instances; i++ {
			ls[i] = openRunner(t, a, k)
		}
		ctx := context.Background()
		key := "lease-mutex-" + t.Name()
		var in testdb.Holders
		var toks tokens
		wins, losses := 0, 0
		for round := range rounds {
			var wg sync.WaitGroup
			gate := make(chan struct{})
			errs := make([]error, instances)
			for i, l := range ls {
				wg.Go(func() {
					<-gate
					body := func(tok int64, ok bool) error {
						defer in.Enter()()
						toks.seeToken(tok, ok)
						time.Sleep(2 * time.Millisecond)
						return nil
					}
					if (round+i)%2 == 0 {
						errs[i] = l.Session(ctx, key, func(ctx context.Context) error { return body(ormlock.FencingToken(ctx)) }, opts...)
					} else {
						errs[i] = l.Transaction(ctx, key, func(tx txn) error { return body(tx.FencingToken()) }, opts...)
					}
				})
			}
			close(gate)
			wg.Wait()
			roundWins := 0
			for _, err := range errs {
				switch {
				case err == nil:
					roundWins++
				case errors.Is(err, ormlock.ErrNotAcquired):
					losses++
				default:
					t.Fatalf("round %d: %v", round, err)
				}
			}
			if roundWins == 0 {
				t.Fatalf("round %d: nobody acquired a free lease", round)
			}
			wins += roundWins
		}
		if got := in.Max(); got != 1 {
			t.Fatalf("max holders inside fn at once = %d, want 1", got)
		}
		if len(toks.bad) > 0 {
			t.Fatalf("tokens not strictly growing: %v", toks.bad)
		}
		if n := liveLeases(t, k, leaseTableOf(t, k)); n != 0 {
			t.Fatalf("%d leases left unexpired after the release", n)
		}
		t.Logf("%d wins, %d ErrNotAcquired, last epoch %d", wins, losses, toks.last)
	})
}

// A lease pins no connection: a Session on a pool of one connection holds
// its lease while fn's own queries use that connection.
func TestLeasePoolOfOne(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		opts := leaseOpts(t, k, r, 3*time.Second)
		pool := r.Pool()
		pool.SetMaxOpenConns(1)
		key := "lease-pool1-" + t.Name()
		err := r.Session(context.Background(), key, func(ctx context.Context) error {
			var n int
			if err := pool.QueryRowContext(ctx, "SELECT 1").Scan(&n); err != nil {
				return err
			}
			if got := pool.Stats().InUse; got != 0 {
				t.Errorf("InUse while fn runs = %d, want 0", got)
			}
			return r.Session(ctx, key, func(context.Context) error { return errors.New("a second holder ran") }, opts...)
		}, opts...)
		if !errors.Is(err, ormlock.ErrNotAcquired) {
			t.Fatalf("second Session of a held lease: %v, want ErrNotAcquired", err)
		}
		if n := liveLeases(t, k, leaseTableOf(t, k)); n != 0 {
			t.Fatalf("%d leases left unexpired", n)
		}
	})
}

// TTLs outside 1s..24h are refused by the call, before anything is taken.
func TestLeaseBadTTL(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		for _, ttl := range []time.Duration{-time.Second, 500 * time.Millisecond, 25 * time.Hour} {
			err := r.Session(context.Background(), "lease-bad", func(context.Context) error { return errors.New("ran") }, ormlock.WithLease(ttl))
			if !errors.Is(err, ormlock.ErrInvalidArgument) {
				t.Errorf("WithLease(%v): %v, want ErrInvalidArgument", ttl, err)
			}
		}
	})
}

// stopped are the key parts whose leases' renewals the tests stopped.
var (
	stoppedMu sync.Mutex
	stopped   = map[string]int{}
	hookOnce  sync.Once
)

// stopRenewing stops the renewals of the leases whose key contains part,
// until the test ends, as a holder whose process froze.
func stopRenewing(t *testing.T, part string) (resume func()) {
	hookOnce.Do(func() {
		lockproto.SetLeaseRenewHook(func(_, key string) bool {
			stoppedMu.Lock()
			defer stoppedMu.Unlock()
			for p := range stopped {
				if strings.Contains(key, p) {
					return false
				}
			}
			return true
		})
	})
	resume = stoppedParts(part)
	t.Cleanup(resume)
	return resume
}

// stoppedParts stops the renewals of part's leases and returns what
// starts them again (once).
func stoppedParts(part string) func() {
	stoppedMu.Lock()
	stopped[part]++
	stoppedMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			stoppedMu.Lock()
			defer stoppedMu.Unlock()
			if stopped[part]--; stopped[part] == 0 {
				delete(stopped, part)
			}
		})
	}
}

// A holder that stops renewing (frozen) learns of the loss from its own
// deadline, before the server lets anyone else take the key: fn's context
// ends with cause ErrLockLost, Session's error wraps it, and the next
// holder, waiting, gets the key once the lease expired, with a greater
// epoch.
func TestLeaseExpiryTakeover(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r, r2 := openRunner(t, a, k), openRunner(t, a, k)
		opts := leaseOpts(t, k, r, time.Second)
		key := "lease-expiry-" + t.Name()
		stopRenewing(t, key)
		var lostAt, grantedAt time.Time
		var tok1, tok2 int64
		var cause error
		acquired := make(chan struct{})
		var wg sync.WaitGroup
		var err2 error
		wg.Go(func() {
			<-acquired
			err2 = r2.Session(context.Background(), key, func(ctx context.Context) error {
				grantedAt = time.Now()
				tok2, _ = ormlock.FencingToken(ctx)
				return nil
			}, append(opts, ormlock.WithWait(10*time.Second))...)
		})
		err := r.Session(context.Background(), key, func(ctx context.Context) error {
			tok1, _ = ormlock.FencingToken(ctx)
			close(acquired)
			<-ctx.Done()
			lostAt = time.Now()
			cause = context.Cause(ctx)
			return ctx.Err()
		}, opts...)
		wg.Wait()
		if !errors.Is(err, ormlock.ErrLockLost) || !errors.Is(cause, ormlock.ErrLockLost) {
			t.Fatalf("frozen holder: Session %v, fn's cause %v; want ErrLockLost", err, cause)
		}
		if err2 != nil {
			t.Fatalf("next holder: %v", err2)
		}
		if !lostAt.Before(grantedAt) {
			t.Fatalf("the frozen holder learnt of its loss at %v, after the next holder's grant at %v", lostAt, grantedAt)
		}
		if tok2 <= tok1 {
			t.Fatalf("epochs %d then %d, want growing", tok1, tok2)
		}
	})
}

// A renewal that finds the row changed (here by hand: another holder id)
// cancels fn's context with cause ErrLockLost.
func TestLeaseRowChanged(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		opts := leaseOpts(t, k, r, time.Second)
		key := "lease-changed-" + t.Name()
		table := leaseTableOf(t, k)
		var cause error
		err := r.Session(context.Background(), key, func(ctx context.Context) error {
			if _, err := testdb.AdminDB(t, k).Exec("UPDATE " + table + " SET holder = 'someone else' WHERE lock_key = 'name:" + key + "'"); err != nil {
				return err
			}
			<-ctx.Done()
			cause = context.Cause(ctx)
			return ctx.Err()
		}, opts...)
		if !errors.Is(err, ormlock.ErrLockLost) || !errors.Is(cause, ormlock.ErrLockLost) {
			t.Fatalf("Session %v, fn's cause %v; want ErrLockLost", err, cause)
		}
	})
}

// A Transaction whose lease expired and was taken over while fn ran (its
// holder frozen) cannot commit: the check before COMMIT fails, fn's
// writes are rolled back and the error wraps ErrLockLost.
func TestLeaseTransactionTakenOver(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r, r2 := openRunner(t, a, k), openRunner(t, a, k)
		opts := leaseOpts(t, k, r, time.Second)
		key := "lease-txover-" + t.Name()
		owner := "lease-txover-" + a.name + "-" + string(k)
		stopRenewing(t, key)
		err := r.Transaction(context.Background(), key, func(tx txn) error {
			if err := tx.Insert(owner, 1); err != nil {
				return err
			}
			// another holder takes the key over once the lease expired
			return r2.Session(context.Background(), key, func(context.Context) error { return nil }, append(opts, ormlock.WithWait(10*time.Second))...)
		}, opts...)
		if !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("Transaction after a takeover: %v, want ErrLockLost", err)
		}
		if n := enttest.Count(t, k, owner); n != 0 {
			t.Fatalf("%d rows of fn committed after the takeover", n)
		}
	})
}

// A key's first lease epoch starts above its advisory fencing counter, so
// CheckFenced keeps working across a move from advisory locks to leases;
// AdvanceFences moves the lease epochs as it moves the counters; a
// transactional RunOnce takes its lock as a lease too.
func TestLeaseEpochsAboveFences(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		opts := leaseOpts(t, k, r, 5*time.Second)
		advisory := slices.Clip(opts[:2]) // the tables, no lease
		ctx := context.Background()
		key := "lease-fence-" + t.Name()
		var last int64
		for range 3 {
			if err := r.Transaction(ctx, key, func(tx txn) error { last, _ = tx.FencingToken(); return nil }, append(advisory, ormlock.WithFencing())...); err != nil {
				t.Fatal(err)
			}
		}
		epoch := func() int64 {
			var e int64
			if err := r.Session(ctx, key, func(ctx context.Context) error { e, _ = ormlock.FencingToken(ctx); return nil }, opts...); err != nil {
				t.Fatal(err)
			}
			return e
		}
		if e := epoch(); e <= last {
			t.Fatalf("first lease epoch %d, want above the advisory token %d", e, last)
		}
		e1 := epoch()
		var rowEpoch int64
		if err := testdb.AdminDB(t, k).QueryRow("SELECT epoch FROM " + leaseTableOf(t, k) + " WHERE lock_key = 'name:" + key + "' AND reader = ''").Scan(&rowEpoch); err != nil || rowEpoch != e1 {
			t.Fatalf("lease row's epoch %d (%v), want the token %d", rowEpoch, err, e1)
		}
		if held, err := r.Holder(ctx, key, advisory...); err != nil || held.Held {
			t.Fatalf("advisory Holder while no lease is held: %+v, %v", held, err)
		}
		if _, err := r.AdvanceFences(ctx, 1000, advisory...); err != nil {
			t.Fatal(err)
		}
		if e2 := epoch(); e2 <= e1+1000 {
			t.Fatalf("epoch after AdvanceFences(1000): %d, want above %d", e2, e1+1000)
		}
		slot := testdb.Slot(0)
		if err := r.RunOnce(ctx, "lease-job", slot, func(txn) error { return nil }, opts...); err != nil {
			t.Fatalf("RunOnce as a lease: %v", err)
		}
		if err := r.RunOnce(ctx, "lease-job", slot, func(txn) error { return errors.New("ran twice") }, opts...); !errors.Is(err, ormlock.ErrAlreadyDone) {
			t.Fatalf("RunOnce again: %v, want ErrAlreadyDone", err)
		}
		if n := liveLeases(t, k, leaseTableOf(t, k)); n != 0 {
			t.Fatalf("%d leases left unexpired", n)
		}
	})
}

// Three Sessions of one pool renew in one batch; one lease's row is
// changed by hand: the batch renews fewer rows than it names, its leases
// are renewed one by one, and only the changed one is lost.
func TestLeaseBatchPartialLoss(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		opts := leaseOpts(t, k, r, time.Second)
		base := "lease-batch-" + t.Name() + "-"
		table := leaseTableOf(t, k)
		var wg sync.WaitGroup
		errs := make([]error, 3)
		in := make(chan struct{}, 3)
		leave := make(chan struct{})
		for i := range 3 {
			wg.Go(func() {
				errs[i] = r.Session(context.Background(), base+strconv.Itoa(i), func(ctx context.Context) error {
					in <- struct{}{}
					select {
					case <-leave:
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				}, opts...)
			})
		}
		for range 3 {
			select {
			case <-in:
			case <-time.After(30 * time.Second):
				close(leave)
				wg.Wait()
				t.Fatalf("the three Sessions did not all hold: %v", errs)
			}
		}
		if _, err := testdb.AdminDB(t, k).Exec("UPDATE " + table + " SET holder = 'someone else' WHERE lock_key = 'name:" + base + "1'"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond) // past the changed lease's deadline
		close(leave)
		wg.Wait()
		if errs[0] != nil || errs[2] != nil {
			t.Fatalf("leases whose rows were left alone: %v, %v; want nil", errs[0], errs[2])
		}
		if !errors.Is(errs[1], ormlock.ErrLockLost) {
			t.Fatalf("lease whose row was changed: %v, want ErrLockLost", errs[1])
		}
	})
}

// RunOnce's claim mode holds its (job, slot) lock as a lease too.
func TestLeaseClaim(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		opts := leaseOpts(t, k, r, 5*time.Second)
		ctx := context.Background()
		slot := testdb.Slot(0)
		copts := append(slices.Clip(opts), ormlock.WithClaim())
		if err := r.RunOnce(ctx, "lease-claim", slot, func(txn) error { return nil }, copts...); err != nil {
			t.Fatalf("claim-mode RunOnce as a lease: %v", err)
		}
		if err := r.RunOnce(ctx, "lease-claim", slot, func(txn) error { return errors.New("ran twice") }, copts...); !errors.Is(err, ormlock.ErrAlreadyDone) {
			t.Fatalf("claim-mode RunOnce again: %v, want ErrAlreadyDone", err)
		}
		if n := liveLeases(t, k, leaseTableOf(t, k)); n != 0 {
			t.Fatalf("%d leases left unexpired", n)
		}
	})
}

// WithWait under a lease: a waiter gets the key once its holder releases
// it, within its wait; a wait that runs out is ErrNotAcquired; Lock in the
// caller's transaction is refused (a lease commits on its own).
func TestLeaseWaitAndNested(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r, r2 := openRunner(t, a, k), openRunner(t, a, k)
		opts := leaseOpts(t, k, r, 5*time.Second)
		ctx := context.Background()
		key := "lease-wait-" + t.Name()
		var werr, short error
		done := make(chan struct{})
		err := r.Session(ctx, key, func(context.Context) error {
			short = r2.Session(ctx, key, func(context.Context) error { return errors.New("ran while held") }, append(slices.Clip(opts), ormlock.WithWait(100*time.Millisecond))...)
			go func() {
				defer close(done)
				werr = r2.Session(ctx, key, func(context.Context) error { return nil }, append(slices.Clip(opts), ormlock.WithWait(10*time.Second))...)
			}()
			time.Sleep(300 * time.Millisecond)
			return nil
		}, opts...)
		<-done
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(short, ormlock.ErrNotAcquired) {
			t.Fatalf("a wait that ran out: %v, want ErrNotAcquired", short)
		}
		if werr != nil {
			t.Fatalf("a waiter after the release: %v", werr)
		}
		if a.name != "sqllock" {
			return
		}
		tx, err := r.Pool().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if err := sqllock.Lock(ctx, tx, ormlock.Name(key), opts...); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Fatalf("Lock in the caller's transaction with a lease: %v, want ErrInvalidArgument", err)
		}
	})
}
