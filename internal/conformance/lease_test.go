package conformance_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
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
	return append(opts, ormlock.WithLease(ttl))
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

func (s *tokens) see(ctx context.Context) { s.seeToken(ormlock.FencingToken(ctx)) }

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

// stopRenewing stops the renewals of the leases whose key contains part,
// until the test ends.
func stopRenewing(t *testing.T, part string) {
	lockproto.SetLeaseRenewHook(func(_, key string) bool { return !strings.Contains(key, part) })
	t.Cleanup(func() { lockproto.SetLeaseRenewHook(nil) })
}
