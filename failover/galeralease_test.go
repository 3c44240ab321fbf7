package failover_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/sqllock"
)

// galeraPools opens a pool on each node of g (clients on different nodes)
// and creates the tables through the first with MigrateSQL's statements:
// Migrate takes the server's named lock, which Galera refuses.
func galeraPools(t *testing.T, g *testdb.Galera) []*sql.DB {
	t.Helper()
	var dbs []*sql.DB
	for _, n := range g.Nodes {
		dbs = append(dbs, openPool(t, "mysql", n.DSN()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := sqllock.Migrate(ctx, dbs[0])
	t.Logf("figure: Galera: Migrate: %v", err)
	stmts, err := ormlock.MigrateSQL("mysql")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stmts {
		if _, err := dbs[0].ExecContext(ctx, s); err != nil {
			t.Fatalf("MigrateSQL statement on node 1: %v\n%s", err, s)
		}
	}
	return dbs
}

// TestGaleraLeases starts a three-node Galera cluster (every node under
// libfaketime) with clients on every node: each lease verb and shape
// excludes across the nodes (an in-process counter of holders inside fn
// never above one, or n for Semaphore(n)); Shared's readers hold together
// and a writer alone; two clients on two nodes that insert the same free
// key at once are one grant and one ErrNotAcquired (the certification
// conflict at COMMIT is no other error); and a node whose clock runs ahead
// of the others by less than the documented bound (TTL > skew + renewal
// interval) never takes a lease still held on another node. The advisory
// verbs stay refused there.
func TestGaleraLeases(t *testing.T) {
	topology(t)
	g := testdb.StartGaleraWith(t, testdb.GaleraConfig{Nodes: 3, FakeClocks: true, FastEviction: true})
	t.Logf("figure: Galera cluster of 3 nodes on MariaDB %s", g.Version(t))
	dbs := galeraPools(t, g)
	lease := ormlock.WithLease(2 * time.Second)

	for _, v := range leaseVerbs {
		t.Run(v.name, func(t *testing.T) {
			most, got := contend(t, v, dbs, 2, "galera-"+v.name, 3*time.Second, 20*time.Millisecond,
				lease, ormlock.WithWait(500*time.Millisecond))
			t.Logf("figure: Galera, %s with a lease: %v acquisitions on nodes 1..3 in 3s, at most %d holders at once", v.name, got, most)
			if most > v.max {
				t.Errorf("%s: %d holders at once across the nodes, want at most %d", v.name, most, v.max)
			}
			// exclusion is exercised across nodes once two of them took
			// turns; no verb promises every node a turn in 3s (a Lead's
			// node that just resigned often campaigns first again)
			nodes := 0
			for _, n := range got {
				if n > 0 {
					nodes++
				}
			}
			if nodes < 2 {
				t.Errorf("%s: the clients of only %d node acquired: %v", v.name, nodes, got)
			}
		})
	}
	t.Run("Shared", func(t *testing.T) { testSharedLease(t, dbs, lease) })
	t.Run("certification conflict", func(t *testing.T) { testCertification(t, dbs, lease) })
	t.Run("skewed clock", func(t *testing.T) { testSkewedNode(t, g, dbs) })
	t.Run("advisory refused", func(t *testing.T) {
		ran := 0
		err := sqllock.Session(context.Background(), dbs[1], "galera-advisory", func(context.Context) error { ran++; return nil })
		if !errors.Is(err, ormlock.ErrUnsupportedDialect) || !strings.Contains(err.Error(), "WithLease") || ran != 0 {
			t.Errorf("Session without a lease on Galera: %v (fn ran %d times), want ErrUnsupportedDialect naming WithLease", err, ran)
		}
	})
}

// testSharedLease: readers (Shared) and writers (the key itself) on every
// node of dbs: a writer is alone, readers hold together.
func testSharedLease(t *testing.T, dbs []*sql.DB, opts ...ormlock.Option) {
	var (
		readers, writers, bad atomic.Int64
		mostReaders           testdb.Holders
		wg                    sync.WaitGroup
		end                   = time.Now().Add(3 * time.Second)
	)
	opts = append(opts, ormlock.WithWait(500*time.Millisecond))
	for i, db := range dbs {
		for w := range 2 {
			write := (i+w)%3 == 0
			wg.Go(func() {
				for time.Now().Before(end) {
					key := ormlock.Shared("galera-shared")
					if write {
						key = ormlock.Name("galera-shared")
					}
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					err := sqllock.Session(ctx, db, key, func(context.Context) error {
						if write {
							if writers.Add(1) > 1 || readers.Load() > 0 {
								bad.Add(1)
							}
							defer writers.Add(-1)
						} else {
							defer mostReaders.Enter()()
							readers.Add(1)
							if writers.Load() > 0 {
								bad.Add(1)
							}
							defer readers.Add(-1)
						}
						time.Sleep(30 * time.Millisecond)
						return nil
					}, opts...)
					cancel()
					if err != nil && !errors.Is(err, ormlock.ErrNotAcquired) {
						t.Errorf("Shared on node %d (writer %v): %v", i+1, write, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	t.Logf("figure: Galera, Shared with a lease: at most %d readers at once, %d overlaps of a writer with anyone", mostReaders.Max(), bad.Load())
	if bad.Load() != 0 {
		t.Errorf("a writer held with another holder %d times", bad.Load())
	}
}

// testCertification: in each round two clients on two different nodes
// take the same free key at once, try-once: at most one holds it, and the
// other's error is ErrNotAcquired whether it saw the row committed or
// lost the certification of its own insert.
func testCertification(t *testing.T, dbs []*sql.DB, opts ...ormlock.Option) {
	const rounds = 20
	var granted, refused, conflicts int
	for r := range rounds {
		key := fmt.Sprintf("galera-cert-%d", r)
		var (
			start   = make(chan struct{})
			wg      sync.WaitGroup
			holders testdb.Holders
			errs    [2]error
		)
		for i := range 2 {
			wg.Go(func() {
				<-start
				errs[i] = sqllock.Session(context.Background(), dbs[i], key, func(context.Context) error {
					defer holders.Enter()()
					time.Sleep(200 * time.Millisecond)
					return nil
				}, opts...)
			})
		}
		close(start)
		wg.Wait()
		if holders.Max() > 1 {
			t.Errorf("round %d: both nodes' clients held %q at once", r, key)
		}
		for _, err := range errs {
			switch {
			case err == nil:
				granted++
			case errors.Is(err, ormlock.ErrNotAcquired):
				refused++
				if s := strings.ToLower(err.Error()); strings.Contains(s, "deadlock") || strings.Contains(s, "certification") {
					conflicts++
				}
			default:
				t.Errorf("round %d: %v, want nil or ErrNotAcquired", r, err)
			}
		}
	}
	t.Logf("figure: Galera: %d rounds of two nodes taking one free key at once: %d grants, %d ErrNotAcquired (%d of them a certification conflict)",
		rounds, granted, refused, conflicts)
	if granted == 0 {
		t.Error("no round granted the key to either node")
	}
}

// testSkewedNode: node 3's clock runs 1s ahead of the others while a
// client of node 1 holds a 3s lease (renewed every 1s): node 3's clients,
// which see the lease expire a second early by their clock, never take it
// while it is held, since TTL (3s) > skew (1s) + renewal interval (1s).
// Once released, node 3 takes it with a greater epoch.
func testSkewedNode(t *testing.T, g *testdb.Galera, dbs []*sql.DB) {
	const (
		ttl  = 3 * time.Second
		skew = time.Second
	)
	g.Nodes[2].Clock().Set(t, skew)
	defer g.Nodes[2].Clock().Set(t, 0)
	lease := ormlock.WithLease(ttl)
	h := hold(t, dbs[0], "galera-skew", lease)
	var tries, taken int
	for end := time.Now().Add(4 * ttl); time.Now().Before(end); {
		tries++
		_, _, err := epochOf(t, dbs[2], "galera-skew", lease)
		switch {
		case err == nil:
			taken++
		case !errors.Is(err, ormlock.ErrNotAcquired):
			t.Fatalf("node 3: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if h.Lost() {
		t.Errorf("the holder on node 1 lost its lease (%v) with node 3's clock %v ahead", h.Cause, skew)
	}
	h.Release()
	if err := <-h.Err; err != nil {
		t.Errorf("holder on node 1: %v", err)
	}
	after, _, err := epochOf(t, dbs[2], "galera-skew", lease, ormlock.WithWait(10*time.Second))
	t.Logf("figure: Galera, node 3's clock %v ahead (measured %v), lease TTL %v held on node 1 for %v: node 3 took it %d times in %d tries; after release node 3 got epoch %d (holder's %d)",
		skew, g.Nodes[2].Skew(t), ttl, 4*ttl, taken, tries, after, h.Epoch)
	if taken != 0 {
		t.Errorf("node 3 took the lease %d times while node 1 held it", taken)
	}
	if err != nil || after <= h.Epoch {
		t.Errorf("after release: epoch %d, %v; want one above %d", after, err, h.Epoch)
	}
}

// TestGaleraLeaseNodeKill: clients of node 1 and node 3 of a three-node
// Galera cluster hold leases; node 3 is killed with kill -9. Only node
// 3's client loses its lease (fn's ctx cancelled with ErrLockLost); the
// lease expires by the survivors' clock and a client of node 2 takes it
// over with a greater epoch, after the old holder learned of the loss;
// node 1's client keeps its lease throughout, and node 2 cannot take it.
func TestGaleraLeaseNodeKill(t *testing.T) {
	topology(t)
	g := testdb.StartGaleraWith(t, testdb.GaleraConfig{Nodes: 3, FastEviction: true})
	dbs := galeraPools(t, g)
	const ttl = 6 * time.Second
	lease := ormlock.WithLease(ttl)
	kept := hold(t, dbs[0], "galera-kill-kept", lease)
	doomed := hold(t, dbs[2], "galera-kill-lost", lease)
	time.Sleep(ttl / 2)

	killed := time.Now()
	g.Kill(t, 2)
	t.Logf("figure: Galera: node 3 killed (kill -9); nodes 1 and 2 synced as a cluster of 2 after %v", time.Since(killed).Round(time.Millisecond))
	waitLost(t, doomed, "node 3's holder", 2*ttl)
	taken, grantedAt, err := epochOf(t, dbs[1], "galera-kill-lost", lease, ormlock.WithWait(3*ttl))
	if err != nil {
		t.Fatalf("node 2 taking over node 3's lease: %v", err)
	}
	t.Logf("figure: Galera, lease TTL %v: node 3's holder learned of the loss %v after the kill; node 2 took the lease over %v after the kill, epoch %d (was %d)",
		ttl, doomed.EndedAt.Sub(killed).Round(time.Millisecond), grantedAt.Sub(killed).Round(time.Millisecond), taken, doomed.Epoch)
	if taken <= doomed.Epoch {
		t.Errorf("takeover epoch %d, want above %d", taken, doomed.Epoch)
	}
	if !doomed.EndedAt.Before(grantedAt) {
		t.Errorf("node 2 was granted the lease (%v) before node 3's holder learned of its loss (%v)", grantedAt, doomed.EndedAt)
	}
	if _, _, err := epochOf(t, dbs[1], "galera-kill-kept", lease); !errors.Is(err, ormlock.ErrNotAcquired) {
		t.Errorf("node 2 taking node 1's held lease: %v, want ErrNotAcquired", err)
	}
	time.Sleep(ttl)
	if kept.Lost() {
		t.Errorf("node 1's holder lost its lease (%v) when node 3 was killed", kept.Cause)
	}
	kept.Release()
	if err := <-kept.Err; err != nil {
		t.Errorf("node 1's holder: %v", err)
	}
}
