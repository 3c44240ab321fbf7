package conformance_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/stmtlog"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/sqllock"
)

// leaseScaleN is how many leases TestLeaseManyOnFewConns holds (bench's
// TestLeaseScale measures 10,000).
const leaseScaleN = 2000

// TestLeaseManyOnFewConns: 2,000 Sessions of one process hold leases at
// once on a pool of 4 connections, and their renewals are batched: over
// 2 renewal intervals of an 8 s TTL (long enough that a loaded machine
// renews every lease in time) the process sends a few renewal statements
// (one per interval for up to 1,024 leases: 2 per interval here), not one per lease, and every lease is renewed. The statements are
// counted by the server: PostgreSQL's statement log (directly and behind
// PgBouncer), MariaDB's Com_update. All are released at the end, no
// connection in use.
func TestLeaseManyOnFewConns(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) { // one at a time: the statement log is the server's
		var db *sql.DB
		var sl *stmtlog.Log
		if k.Dialect() == "postgres" {
			sl = stmtlog.Start(t, k)
			db = sl.OpenPool(t, 4)
		} else {
			db = testdb.Open(t, k)
			db.SetMaxOpenConns(4)
			db.SetMaxIdleConns(4)
		}
		table, tables := leaseTablesOf(t, k, db, "lscale")
		ctx := context.Background()
		opts := append(tables, ormlock.WithLease(8*time.Second))

		// fn returns when release is closed: each Session then expires its
		// lease on its own live context
		release := make(chan struct{})
		var once sync.Once
		stop := func() { once.Do(func() { close(release) }) }
		held := make(chan error, 2*leaseScaleN)
		var wg sync.WaitGroup
		// releases that failed, and losses: a loaded machine can make a
		// release wait past its grace, and such a lease expires at its
		// TTL (an event, not the Session's error)
		var endMu sync.Mutex
		var ended []string
		watch := ormlock.WithObserver(ormlock.ObserverFunc(func(_ context.Context, e ormlock.Event) {
			if e.Kind == ormlock.EventReleaseFailed || e.Kind == ormlock.EventLockLost {
				endMu.Lock()
				ended = append(ended, fmt.Sprintf("%s %s: %v", e.Kind, e.Key, e.Err))
				endMu.Unlock()
			}
		}))
		opts = append(opts, watch)
		for i := range leaseScaleN {
			wg.Go(func() {
				err := sqllock.Session(ctx, db, fmt.Sprintf("scale-%s-%d", k, i), func(ctx context.Context) error {
					held <- nil
					select {
					case <-release:
					case <-ctx.Done():
						held <- fmt.Errorf("lease %d lost: %w", i, context.Cause(ctx))
					}
					return nil
				}, opts...)
				if err != nil {
					held <- err
				}
			})
		}
		t.Cleanup(func() { stop(); wg.Wait() })
		for range leaseScaleN {
			if err := <-held; err != nil {
				t.Fatalf("holding %d leases: %v", leaseScaleN, err)
			}
		}
		if n := liveLeases(t, k, table); n != leaseScaleN {
			t.Fatalf("%d live leases, want %d", n, leaseScaleN)
		}

		rows0 := renewalsOf(t, k, table)
		var stmts int
		const window = 5500 * time.Millisecond
		if sl != nil {
			for _, s := range sl.During(t, func() { time.Sleep(window) }) {
				if strings.Contains(s, "UPDATE "+`"`+table+`"`) && strings.Contains(s, "renewals = l.renewals + 1") {
					stmts++
				}
			}
		} else {
			u0 := comUpdate(t)
			time.Sleep(window)
			stmts = comUpdate(t) - u0
		}
		rows := renewalsOf(t, k, table) - rows0
		st := db.Stats()
		t.Logf("%s: %d leases held on %d connections (max %d, %d in use); over %v: %d renewal statements, %d rows renewed",
			k, leaseScaleN, st.OpenConnections, st.MaxOpenConnections, st.InUse, window, stmts, rows)
		select {
		case err := <-held:
			t.Fatalf("while held: %v", err)
		default:
		}
		if st.OpenConnections > 4 {
			t.Errorf("%d connections open, want at most 4", st.OpenConnections)
		}
		// 2 or 3 intervals of ~2.7 s, 2 chunks of at most 1,024 rows each
		// (plus the one-by-one fallback, never expected here)
		if stmts < 2 || stmts > 10 {
			t.Errorf("%d renewal statements for %d leases over %v, want a few batches (2 per interval)", stmts, leaseScaleN, window)
		}
		if rows < leaseScaleN {
			t.Errorf("%d rows renewed, want every one of %d at least once", rows, leaseScaleN)
		}

		stop()
		wg.Wait()
		// only the leases whose release failed, or that were lost, may
		// be left, to expire at their TTL
		for _, e := range ended {
			t.Logf("observer: %s", e)
		}
		if n := liveLeases(t, k, table); n > len(ended) {
			t.Errorf("%d live leases after the release; %d releases failed or leases were lost", n, len(ended))
		}
		testdb.AssertNoLeaks(t, k, db)
	})
}

// renewalsOf sums the renewals of table's rows: each row a renewal
// statement extended counts one.
func renewalsOf(t *testing.T, k testdb.Kind, table string) int {
	t.Helper()
	var n int
	if err := testdb.AdminDB(t, k).QueryRow("SELECT COALESCE(SUM(renewals), 0) FROM " + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// comUpdate is MariaDB's count of UPDATE statements since it started.
func comUpdate(t *testing.T) int {
	t.Helper()
	var name string
	var n int
	if err := testdb.AdminDB(t, testdb.MariaDB).QueryRow("SHOW GLOBAL STATUS LIKE 'Com_update'").Scan(&name, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestLeaseBurstShortTTL reproduces a loss found by bench's TestLeaseOpCost
// (a burst of leases with a short TTL behind PgBouncer: docs/BENCHMARKS.md,
// Leases): 1,000 Sessions take leases of a 3 s TTL at once on a pool
// of 4 connections behind PgBouncer, and none may be lost while held for
// two TTLs. bench lost one lease so in two runs (and none in a third, after
// later lease commits); this ran clean when written. It runs only when
// ORMLOCK_TEST_LEASE_BURST is set, not in make test: a reproducer of a
// load-dependent loss, not a check of every run.
func TestLeaseBurstShortTTL(t *testing.T) {
	if os.Getenv("ORMLOCK_TEST_LEASE_BURST") == "" {
		t.Skip("a reproducer of a loss seen under a burst (docs/BENCHMARKS.md, Leases): set ORMLOCK_TEST_LEASE_BURST=1 to run it")
	}
	const n, ttl = 1000, 3 * time.Second
	k := testdb.PgBouncer
	db := testdb.Open(t, k)
	db.SetMaxOpenConns(4)
	db.SetMaxIdleConns(4)
	_, tables := leaseTablesOf(t, k, db, "lburst")
	ctx := context.Background()
	opts := append(tables, ormlock.WithLease(ttl))
	release := make(chan struct{})
	lost := make(chan error, n)
	held := make(chan struct{}, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			err := sqllock.Session(ctx, db, fmt.Sprintf("burst-%d", i), func(ctx context.Context) error {
				held <- struct{}{}
				select {
				case <-release:
				case <-ctx.Done():
					lost <- fmt.Errorf("lease %d lost: %w", i, context.Cause(ctx))
				}
				return nil
			}, opts...)
			if err != nil {
				lost <- err
			}
		})
	}
	for range n {
		<-held
	}
	time.Sleep(2 * ttl)
	close(release)
	wg.Wait()
	close(lost)
	count := 0
	for err := range lost {
		if count == 0 {
			t.Error(err)
		}
		count++
	}
	if count > 0 {
		t.Errorf("%d of %d leases lost or failed", count, n)
	}
	testdb.AssertNoLeaks(t, k, db)
}

// leaseTablesOf migrates a ledger and a lease table of the test's own on
// db, dropped at its end, and returns the lease table and the options
// that name both.
func leaseTablesOf(t *testing.T, k testdb.Kind, db *sql.DB, prefix string) (string, []ormlock.Option) {
	t.Helper()
	ledger := testdb.Table(t, k, prefix)
	table := ledger + "_l"
	t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + table) })
	tables := []ormlock.Option{ormlock.WithLedgerTable(ledger), ormlock.WithLeaseTable(table)}
	if err := sqllock.Migrate(context.Background(), db, tables...); err != nil {
		t.Fatal(err)
	}
	return table, tables
}
