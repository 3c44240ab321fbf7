package conformance_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
)

// The deadline and the wait bound a lock shape's whole lock phase, not
// each of its statements (docs/PROTOCOL.md, Deadlines): through a link
// that holds the answer to every lock statement, no lock statement is sent
// once the caller's deadline (or the wait) has passed, the call returns
// within it plus the 1 s grace, and the error says why.

// shapeGrace is the documented grace after the deadline (endGrace).
const shapeGrace = time.Second

// lockStatement matches the statements that take a lock: GET_LOCK, the
// pg_*advisory_*lock functions (not their unlock, nor a look at pg_locks'
// locktype 'advisory', such as a refused semaphore's probe before its
// ROLLBACK).
func lockStatement(q string) bool {
	return strings.Contains(q, "GET_LOCK(") || strings.Contains(q, "advisory_") && !strings.Contains(q, "unlock")
}

// delayedRunner is a's runner on a pool that reaches kind k's server
// through a proxy that can hold lock statements' answers; the pool is
// checked for leaks when the test ends.
func delayedRunner(t *testing.T, a adapter, k testdb.Kind) (runner, *testdb.Proxy) {
	t.Helper()
	px, dsn := testdb.ProxyDSN(t, k)
	db, err := sql.Open(k.Driver(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	r := a.on(t, k.Dialect(), db)
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
	return r, px
}

// shapeRuns are the verbs a shape's deadline applies to: Transaction,
// Session on a dedicated connection and on a shared one.
func shapeRuns(r runner) map[string]shapeVerb {
	fn := func(context.Context) error { return errors.New("fn ran without the lock") }
	return map[string]shapeVerb{
		"Transaction": func(ctx context.Context, key ormlock.Key, opts ...ormlock.Option) error {
			return r.Transaction(ctx, key, func(tx txn) error { return fn(tx.Context()) }, opts...)
		},
		"Session": func(ctx context.Context, key ormlock.Key, opts ...ormlock.Option) error {
			return r.Session(ctx, key, fn, opts...)
		},
		"SharedConns": func(ctx context.Context, key ormlock.Key, opts ...ormlock.Option) error {
			return r.Session(ctx, key, fn, append(opts, ormlock.WithSharedLockConns(1))...)
		},
	}
}

// shapeCase is one shape and how its lock statements' answers are held.
type shapeCase struct {
	name  string
	key   func(t *testing.T, k testdb.Kind, u string) (ormlock.Key, []string) // the key, and the names that must be free after
	delay time.Duration
}

// allFree is All of 10 free keys.
func allFree(t *testing.T, k testdb.Kind, u string) (ormlock.Key, []string) {
	names := make([]string, 10)
	for i := range names {
		names[i] = fmt.Sprintf("setdl-%s-%d", u, i)
	}
	return ormlock.All(names...), names
}

// semaphoreFull is Semaphore(gs, 10) with every slot held elsewhere.
func semaphoreFull(t *testing.T, k testdb.Kind, u string) (ormlock.Key, []string) {
	name := "gs-" + u
	slots := make([]string, 10)
	for i := range slots {
		slots[i] = fmt.Sprintf("ormlock.semaphore:%s#%d", name, i+1)
	}
	holdOn(t, k, slots)
	return ormlock.Semaphore(name, 10), nil
}

// holdOn holds the locks of names with hand-written SQL on one
// connection (not through a proxy; for PgBouncer, straight to the
// PostgreSQL database behind it, as testdb.RawHold does) until the test
// ends.
func holdOn(t *testing.T, k testdb.Kind, names []string) {
	t.Helper()
	ctx := context.Background()
	pg := k.Dialect() == "postgres"
	pool := testdb.AdminDB(t, k)
	if !pg {
		pool = testdb.Open(t, k)
	}
	conn, err := pool.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		release := "DO RELEASE_ALL_LOCKS()"
		if pg {
			release = "SELECT pg_advisory_unlock_all()"
		}
		if _, err := conn.ExecContext(ctx, release); err != nil {
			t.Errorf("release the locks held by hand: %v", err)
			_ = conn.Raw(func(any) error { return driver.ErrBadConn }) // destroyed, with its locks
		}
		conn.Close()
	})
	for _, n := range names {
		var ok bool
		if pg {
			err = conn.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", keyhash.Int64NS("", n)).Scan(&ok)
		} else {
			err = conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0) = 1", keyhash.MySQLName("", n)).Scan(&ok)
		}
		if err != nil || !ok {
			t.Fatalf("hold %s: %v %v", n, ok, err)
		}
	}
}

// shapeVerb is a verb of shapeRuns.
type shapeVerb = func(ctx context.Context, key ormlock.Key, opts ...ormlock.Option) error

// shapeBounds runs each case with every verb of shapeRuns, every adapter,
// on PostgreSQL and MariaDB, through a proxy that holds the answers to
// lock statements for the case's delay: call makes the verb's call, check
// judges its error, how long it took, how many lock statements it sent
// and their texts.
// Every name of the case is free afterwards.
func shapeBounds(t *testing.T, cases []shapeCase, call func(run shapeVerb, key ormlock.Key) error, check func(t *testing.T, c shapeCase, err error, took time.Duration, sent int, texts []string)) {
	forKinds(t, []testdb.Kind{testdb.Postgres, testdb.MariaDB}, func(t *testing.T, a adapter, k testdb.Kind) {
		r, px := delayedRunner(t, a, k)
		for verb, run := range shapeRuns(r) {
			for _, c := range cases {
				t.Run(verb+"/"+c.name, func(t *testing.T) {
					key, names := c.key(t, k, fmt.Sprintf("%s-%s-%d", a.name, k, time.Now().UnixNano()))
					var mu sync.Mutex
					var sent []string
					px.DelayReplies(func(q string) bool {
						if !lockStatement(q) {
							return false
						}
						mu.Lock()
						defer mu.Unlock()
						sent = append(sent, q)
						return true
					}, c.delay)
					defer px.DelayReplies(nil, 0)
					before := len(px.Matched())
					start := time.Now()
					err := call(run, key)
					took := time.Since(start)
					n := len(px.Matched()) - before
					mu.Lock()
					stmts := slices.Clone(sent) // their texts (a prepared statement's once)
					mu.Unlock()
					t.Logf("returned after %v, %d lock statements sent: %v", took.Round(time.Millisecond), n, err)
					check(t, c, err, took, n, stmts)
					px.DelayReplies(nil, 0)
					for _, n := range names {
						if !waitFree(t, k, n) {
							t.Errorf("%s left held", n)
						}
					}
				})
			}
		}
	})
}

func TestShapeDeadlineBound(t *testing.T) {
	const deadline = 300 * time.Millisecond
	cases := []shapeCase{
		{"All of 10 at 800ms", allFree, 800 * time.Millisecond},
		{"All of 10 at 2.5s", allFree, 2500 * time.Millisecond}, // longer than the grace: cut
		{"Semaphore of 10 held at 400ms", semaphoreFull, 400 * time.Millisecond},
	}
	shapeBounds(t, cases, func(run shapeVerb, key ormlock.Key) error {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		return run(ctx, key)
	}, func(t *testing.T, c shapeCase, err error, took time.Duration, sent int, _ []string) {
		if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %v, want ErrNotAcquired and context.DeadlineExceeded", err)
		}
		if limit := deadline + shapeGrace + time.Second; took > limit {
			t.Errorf("returned after %v, past the deadline %v + the grace %v (+1 s slack)", took, deadline, shapeGrace)
		}
		// each answer takes longer than the deadline: the first lock
		// statement is the last
		if sent > 1 {
			t.Errorf("%d lock statements sent, want at most the one under way at the deadline", sent)
		}
	})
}

// waitFree reports whether key's lock is free, or becomes free within 5 s
// (a lock statement cut under way leaves its lock to a connection the
// server has yet to see closed).
func waitFree(t *testing.T, k testdb.Kind, key string) bool {
	t.Helper()
	for until := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if free(t, k, key) {
			return true
		}
		if time.Now().After(until) {
			return false
		}
	}
}

// WithWait bounds a shape's lock phase as a deadline would: no lock
// statement is sent after the wait, and the call returns within it plus
// the grace, however many keys it has; the error is ErrNotAcquired without
// the context's (which has not ended). Where the set travels in one
// statement (PostgreSQL's one message: the Transaction and Session of
// every adapter with it), All of 10 free keys is taken by that statement,
// well within the wait; a set whose last key is held waits for it no
// longer than what is left of the wait (lock_timeout, re-armed per key).
func TestShapeWaitBound(t *testing.T) {
	const (
		wait  = time.Second
		delay = 400 * time.Millisecond
	)
	cases := []shapeCase{
		{"All of 10 free", allFree, delay},
		{"All of 10, the last held", lastHeld, delay},
		{"Semaphore of 10 held", semaphoreFull, delay},
	}
	shapeBounds(t, cases, func(run shapeVerb, key ormlock.Key) error {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		return run(ctx, key, ormlock.WithWait(wait))
	}, func(t *testing.T, c shapeCase, err error, took time.Duration, sent int, texts []string) {
		oneStatement := sent == 1 && len(texts) == 1 && strings.Count(texts[0], "advisory_xact_lock(") == 10
		switch {
		case oneStatement && c.name == "All of 10 free":
			// shapeRuns' fn fails on purpose: that it ran says the set was taken
			if err == nil || !strings.Contains(err.Error(), "fn ran without the lock") {
				t.Errorf("error %v, want the set taken by its one statement (fn ran)", err)
			}
		case !errors.Is(err, ormlock.ErrNotAcquired) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
			t.Errorf("error %v, want ErrNotAcquired without a context's error", err)
		}
		if limit := wait + shapeGrace + time.Second; took > limit {
			t.Errorf("returned after %v, past the wait %v + the grace %v (+1 s slack)", took, wait, shapeGrace)
		}
		// each answer takes 400 ms: a statement starts at 0, 0.4 and 0.8 s
		// at the soonest, none after the 1 s wait
		if most := int((wait + c.delay - 1) / c.delay); sent > most {
			t.Errorf("%d lock statements sent, want at most %d within the wait", sent, most)
		}
	})
}

// lastHeld is All of 10 keys, the last of which in the set's canonical
// order (on either server) is held elsewhere; the other nine must be free
// after.
func lastHeld(t *testing.T, k testdb.Kind, u string) (ormlock.Key, []string) {
	key, names := allFree(t, k, u)
	order := canonicalOn(k, names)
	holdOn(t, k, order[len(order)-1:])
	return key, order[:len(order)-1]
}
