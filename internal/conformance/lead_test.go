package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/leakcheck"
	"github.com/ormlock/ormlock/pgxlock"
	"github.com/ormlock/ormlock/sqllock"
)

// leader is an adapter's Lead, kept apart from locker so that adapters
// without it yet still run the rest of the suite.
type leader interface {
	// Lead campaigns for key and runs fn while elected.
	Lead(ctx context.Context, key any, fn func(ctx context.Context) error, opts ...ormlock.Option) error
}

var (
	_ leader = gormLocker{}
	_ leader = entLocker{}
	_ leader = sqlLocker{}
	_ leader = pgxLocker{}
)

func (g gormLocker) Lead(ctx context.Context, key any, fn func(context.Context) error, opts ...ormlock.Option) error {
	return gormlock.Lead(g.db.WithContext(ctx), keyOf(key), fn, opts...)
}

func (e entLocker) Lead(ctx context.Context, key any, fn func(context.Context) error, opts ...ormlock.Option) error {
	return entlock.Lead(ctx, e.client, keyOf(key), fn, opts...)
}

func (s sqlLocker) Lead(ctx context.Context, key any, fn func(context.Context) error, opts ...ormlock.Option) error {
	return sqllock.Lead(ctx, s.db, keyOf(key), fn, s.with(opts)...)
}

func (p pgxLocker) Lead(ctx context.Context, key any, fn func(context.Context) error, opts ...ormlock.Option) error {
	return pgxlock.Lead(ctx, p.pools.pool(), keyOf(key), fn, p.with(opts)...)
}

// leaderOf returns l's Lead; an adapter without one yet is skipped, or
// fails the test when CI is set.
func leaderOf(t *testing.T, a adapter, l any) leader {
	t.Helper()
	ld, ok := l.(leader)
	if !ok {
		if os.Getenv("CI") != "" {
			t.Fatalf("adapter %s has no Lead", a.name)
		}
		t.Skipf("adapter %s has no Lead yet", a.name)
	}
	return ld
}

// term is one replica's time as leader, as its fn saw it on entry.
type term struct {
	replica int
	token   int64
	inside  int64 // leaders inside fn at that moment, this one included
	owner   string
	pid     int64
}

// recv waits for a value on ch for at most d.
func recv[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("no %s within %v", what, d)
		panic("unreachable")
	}
}

// Three replicas lead one key: one leader at a time in steady state; the
// leader's server connection killed, its fn's context ends with
// ErrLockLost and another replica is elected within two keepalive
// intervals plus a margin; a resignation hands over at once; every term's
// fencing token is greater than the last; Holder names the leader's owner;
// cancelling the context ends every campaign with its cause, leaving the
// lock free.
func TestLead(t *testing.T) {
	leakcheck.Goroutines(t)
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) { leadReplicas(t, a, k) })
}

// The same, the replicas holding their locks on shared lock connections,
// whose campaigns wait by trying again.
func TestLeadSharedLockConns(t *testing.T) {
	leakcheck.Goroutines(t)
	forEachDirect(t, func(t *testing.T, a adapter, k testdb.Kind) {
		leadReplicas(t, a, k, ormlock.WithSharedLockConns(2))
	})
}

func leadReplicas(t *testing.T, a adapter, k testdb.Kind, extra ...ormlock.Option) {
	{
		const keepalive = 200 * time.Millisecond
		const bound = 2*keepalive + 3*time.Second
		var ev testdb.Recorder
		var rs [3]runner
		var ls [3]leader
		for i := range rs {
			rs[i] = a.with(t, k, ormlock.WithObserver(&ev))
			ls[i] = leaderOf(t, a, rs[i])
		}
		tbl := ledgerTable(t, k, rs[0])
		if k.Dialect() == "mysql" {
			t.Cleanup(func() {
				if _, err := testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + tbl + lockproto.OwnersTableSuffix); err != nil {
					t.Errorf("drop owners table: %v", err)
				}
			})
		}
		key := "lead-" + t.Name()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()

		var inside atomic.Int64
		elected := make(chan term, 16)
		deposed := make(chan error, 16)
		type result struct {
			replica int
			err     error
		}
		results := make(chan result, len(rs))
		var resign [3]chan struct{}
		for i := range rs {
			resign[i] = make(chan struct{})
			go func() {
				owner := fmt.Sprintf("replica-%d", i)
				err := ls[i].Lead(ctx, key, func(fctx context.Context) error {
					n := inside.Add(1)
					var once atomic.Bool
					leave := func() {
						if !once.Swap(true) {
							inside.Add(-1)
						}
					}
					defer leave()
					tok, _ := ormlock.FencingToken(fctx)
					h, err := rs[i].Holder(fctx, key, ormlock.WithLedgerTable(tbl))
					if err != nil {
						t.Errorf("replica %d: Holder: %v", i, err)
					}
					elected <- term{replica: i, token: tok, inside: n, owner: h.Owner, pid: h.PID}
					select {
					case <-fctx.Done():
						leave()
						deposed <- context.Cause(fctx)
						return fctx.Err()
					case <-resign[i]:
						return nil
					}
				}, append([]ormlock.Option{ormlock.WithKeepalive(keepalive), ormlock.WithFencing(), ormlock.WithLedgerTable(tbl), ormlock.WithOwner(owner)}, extra...)...)
				results <- result{i, err}
			}()
		}
		var running = len(rs)
		defer func() {
			cancel()
			for ; running > 0; running-- {
				r := recv(t, results, 15*time.Second, "return of Lead after cancel")
				if !errors.Is(r.err, context.Canceled) {
					t.Errorf("replica %d: Lead after cancel = %v, want context.Canceled", r.replica, r.err)
				}
			}
			// a campaign cancelled in its wait may have its connection
			// destroyed, whose backend frees the lock a moment later
			for start := time.Now(); !free(t, k, key); {
				if time.Since(start) > 5*time.Second {
					t.Error("lock held 5s after every Lead returned")
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()

		// steady state: one leader, and nobody else elected meanwhile
		first := recv(t, elected, 15*time.Second, "leader")
		if first.inside != 1 {
			t.Fatalf("first leader saw %d leaders inside fn", first.inside)
		}
		if want := fmt.Sprintf("replica-%d", first.replica); first.owner != want {
			t.Errorf("Holder().Owner = %q, want %q", first.owner, want)
		}
		select {
		case e := <-elected:
			t.Fatalf("replica %d elected while replica %d leads", e.replica, first.replica)
		case <-time.After(3 * keepalive):
		}

		// the leader's lock connection dies
		testdb.Kill(t, k, first.pid)
		killed := time.Now()
		second := recv(t, elected, bound, "leader after the kill")
		cause := recv(t, deposed, bound, "deposition after the kill")
		if d := time.Since(killed); d > bound {
			t.Errorf("re-election and deposition took %v, want within %v", d, bound)
		}
		if !errors.Is(cause, ormlock.ErrLockLost) {
			t.Fatalf("deposed leader's cause = %v, want ErrLockLost", cause)
		}
		if second.token <= first.token {
			t.Errorf("term tokens %d then %d, want increasing", first.token, second.token)
		}
		t.Logf("replica %d led (token %d); killed, replica %d elected (token %d)", first.replica, first.token, second.replica, second.token)

		// resignation hands over at once; the resigner's Lead returns nil
		close(resign[second.replica])
		resigned := time.Now()
		r := recv(t, results, bound, "return of the resigned Lead")
		running--
		if r.replica != second.replica || r.err != nil {
			t.Fatalf("after resigning replica %d: replica %d's Lead returned %v, want replica %d's nil", second.replica, r.replica, r.err, second.replica)
		}
		third := recv(t, elected, bound, "leader after the resignation")
		if d := time.Since(resigned); d > bound {
			t.Errorf("hand-over after resignation took %v, want within %v", d, bound)
		}
		if third.replica == second.replica {
			t.Fatalf("resigned replica %d elected again", third.replica)
		}
		if third.inside != 1 {
			t.Errorf("leader after resignation saw %d leaders inside fn", third.inside)
		}
		if third.token <= second.token {
			t.Errorf("term tokens %d then %d, want increasing", second.token, third.token)
		}
		var electedEv, deposedEv int
		for _, e := range ev.Events() {
			switch {
			case e.Verb != "Lead":
			case e.Kind == ormlock.EventAcquired:
				electedEv++
			case e.Kind == ormlock.EventLockLost:
				deposedEv++
			}
		}
		if electedEv < 3 || deposedEv < 1 {
			t.Errorf("Lead events = %v: %d acquired, %d lock_lost, want three acquired (elected) and a lock_lost (deposed)", ev.Kinds(), electedEv, deposedEv)
		}
	}
}

// Lead returns at once on bad input, without campaigning.
func TestLeadBadInput(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		l := leaderOf(t, a, a.open(t, k))
		ctx := context.Background()
		fn := func(context.Context) error { t.Error("fn called"); return nil }
		if err := l.Lead(ctx, "", fn); !errors.Is(err, ormlock.ErrInvalidKey) {
			t.Errorf("empty key: %v, want ErrInvalidKey", err)
		}
		if err := l.Lead(ctx, "lead-bad", nil); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Errorf("nil fn: %v, want ErrInvalidArgument", err)
		}
		if err := l.Lead(ctx, "lead-bad", fn, ormlock.WithKeepalive(-1)); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Errorf("bad option: %v, want ErrInvalidArgument", err)
		}
	})
}

// A campaign retries connection errors with a backoff until its context
// ends, and returns at once on an error no retry cures (a database that
// does not exist).
func TestLeadConnectionErrors(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		fn := func(context.Context) error { t.Error("fn called"); return nil }
		dsn := testdb.DSN(t, k)
		unknownDB := regexp.MustCompile(`(/)[A-Za-z0-9_]+(\?)`).ReplaceAllString(dsn, "${1}ormlock_no_such_db${2}")
		refused := regexp.MustCompile(`127\.0\.0\.1:[0-9]+`).ReplaceAllString(dsn, "127.0.0.1:1")

		var ev testdb.Recorder
		db, err := sql.Open(k.Driver(), refused)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err = leaderOf(t, a, a.on(t, k.Dialect(), db)).Lead(ctx, "lead-conn", fn, ormlock.WithObserver(&ev))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lead on a refused connection: %v, want the context's deadline", err)
		}
		if n := ev.Count(ormlock.EventNotAcquired); n < 2 {
			t.Errorf("%d failed attempts in 1s, want the campaign to retry (events %v)", n, ev.Kinds())
		}

		if k == testdb.PgBouncer {
			// PgBouncer refuses an unknown database with SQLSTATE 08P01
			// (protocol_violation), which does not say that retrying
			// cannot help: the campaign retries it
			return
		}
		db2, err := sql.Open(k.Driver(), unknownDB)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db2.Close() })
		ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel2()
		err = leaderOf(t, a, a.on(t, k.Dialect(), db2)).Lead(ctx2, "lead-conn", fn)
		if err == nil || ctx2.Err() != nil {
			t.Fatalf("Lead on an unknown database: %v (context %v), want the server's refusal at once", err, ctx2.Err())
		}
		t.Log(err)
	})
}

// A restarted server deposes the leader; the campaign retries while the
// server is down and the replica leads again once it is back.
func TestLeadServerRestart(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
		t.Run(string(k), func(t *testing.T) {
			srv := testdb.Start(t, k)
			db, err := sql.Open(k.Driver(), srv.DSN())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			l := leaderOf(t, adapters[0], adapters[0].on(t, k.Dialect(), db))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			terms := make(chan error, 4)
			done := make(chan error, 1)
			go func() {
				done <- l.Lead(ctx, "lead-restart", func(fctx context.Context) error {
					terms <- nil
					<-fctx.Done()
					terms <- context.Cause(fctx)
					return fctx.Err()
				}, ormlock.WithKeepalive(200*time.Millisecond))
			}()
			recv(t, terms, 15*time.Second, "first term")
			srv.Restart(t)
			if cause := recv(t, terms, 15*time.Second, "deposition by the restart"); !errors.Is(cause, ormlock.ErrLockLost) {
				t.Fatalf("cause after the restart = %v, want ErrLockLost", cause)
			}
			recv(t, terms, 30*time.Second, "a term after the restart")
			cancel()
			if err := recv(t, done, 15*time.Second, "Lead's return"); !errors.Is(err, context.Canceled) {
				t.Fatalf("Lead = %v, want context.Canceled", err)
			}
		})
	}
}
