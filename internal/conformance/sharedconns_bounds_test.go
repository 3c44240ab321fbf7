package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/faults"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/leakcheck"
)

// The bounds of shared lock connections (docs/PROTOCOL.md, Shared lock
// connections): every holder learns of a killed connection within two of
// its own keepalive intervals and of a frozen server within its interval +
// max(2×interval, 2 s), whatever the other holders' intervals; every wait
// on a shared connection ends at most 1 s after the caller's context.

// bgHold is a Session or Lead running in the background whose fn holds
// until quit is closed or its context ends.
type bgHold struct {
	held chan struct{}  // closed when fn first runs
	lost chan time.Time // when fn's context ended, if it did
	quit chan struct{}  // closed: fn returns nil
	done chan struct{}  // closed when the call returned err
	err  error
	once sync.Once
}

// holdBG starts call, whose fn is given; a Lead's later terms resign at
// once. The test's cleanup ends fn and waits for the call.
func holdBG(t *testing.T, call func(fn func(context.Context) error) error) *bgHold {
	t.Helper()
	h := &bgHold{held: make(chan struct{}), lost: make(chan time.Time, 1), quit: make(chan struct{}), done: make(chan struct{})}
	var terms int
	go func() {
		defer close(h.done)
		h.err = call(func(fctx context.Context) error {
			if terms++; terms > 1 {
				return nil // a Lead elected again after a loss: resign
			}
			close(h.held)
			select {
			case <-fctx.Done():
				h.lost <- time.Now()
				return context.Cause(fctx)
			case <-h.quit:
				return nil
			}
		})
	}()
	t.Cleanup(func() {
		h.stop()
		select {
		case <-h.done:
		case <-time.After(30 * time.Second):
			t.Error("a background Session did not return within 30s of its end")
		}
	})
	return h
}

func (h *bgHold) stop() { h.once.Do(func() { close(h.quit) }) }

// waitHeld waits up to 10 s for h's fn to run.
func (h *bgHold) waitHeld(t *testing.T, what string) {
	t.Helper()
	select {
	case <-h.held:
	case <-h.done:
		t.Fatalf("%s returned before holding: %v", what, h.err)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s not holding within 10s", what)
	}
}

// lostWithin reports when h's fn learnt of a loss, failing the test unless
// it did within limit of since.
func (h *bgHold) lostWithin(t *testing.T, what string, since time.Time, limit time.Duration) {
	t.Helper()
	select {
	case at := <-h.lost:
		d := at.Sub(since)
		t.Logf("%s learnt of the loss %v after it", what, d.Round(time.Millisecond))
		if d > limit {
			t.Errorf("%s learnt of the loss %v after it, want within %v", what, d.Round(time.Millisecond), limit)
		}
	case <-time.After(limit):
		t.Errorf("%s did not learn of the loss within %v", what, limit)
	}
}

// returned waits up to 30 s for h's call and returns its error.
func (h *bgHold) returned(t *testing.T, what string) error {
	t.Helper()
	recv(t, h.done, 30*time.Second, what+"'s return")
	return h.err
}

// Session A opens a shared lock connection with a keepalive of 15 s and
// Session B joins it with 200 ms: when the connection is killed, B learns
// of it within two of its own intervals (the connection's check runs at
// the shortest interval of its holders, from the moment one joins). Then
// the same after a short holder joined and left again (the interval grew
// back), for a Lead joining later.
func TestSharedLockConnsJoinerKeepalive(t *testing.T) {
	leakcheck.Goroutines(t)
	forEachDirect(t, func(t *testing.T, a adapter, k testdb.Kind) {
		const long, short = 15 * time.Second, 200 * time.Millisecond
		const bound = 2*short + time.Second // slack for a busy machine
		r := a.with(t, k)
		l := leaderOf(t, a, r)
		ctx := context.Background()
		shared := ormlock.WithSharedLockConns(1)
		key := func(s string) string { return "shj-" + s + "-" + a.name + "-" + string(k) }
		session := func(name string, every time.Duration) *bgHold {
			h := holdBG(t, func(fn func(context.Context) error) error {
				return r.Session(ctx, key(name), fn, shared, ormlock.WithKeepalive(every))
			})
			h.waitHeld(t, "Session "+name)
			return h
		}
		kill := func(name string) time.Time {
			t.Helper()
			id, err := lockHolder(ctx, r, key(name))
			if err != nil {
				t.Fatal(err)
			}
			at := time.Now()
			testdb.Kill(t, k, id)
			return at
		}
		lost := func(h *bgHold, what string) {
			t.Helper()
			if err := h.returned(t, what); !errors.Is(err, ormlock.ErrLockLost) {
				t.Errorf("%s: %v, want ErrLockLost", what, err)
			}
		}

		// B joins A's connection
		a1 := session("a1", long)
		b1 := session("b1", short)
		killed := kill("a1")
		b1.lostWithin(t, "the joiner", killed, bound)
		lost(b1, "the joiner")
		lost(a1, "the opener")

		// a short holder comes and goes; later a Lead joins
		a2 := session("a2", long)
		b2 := session("b2", short)
		b2.stop()
		if err := b2.returned(t, "the holder that left"); err != nil {
			t.Fatalf("the holder that left: %v", err)
		}
		time.Sleep(2 * short) // the connection's check is armed for the opener's interval again
		lead := holdBG(t, func(fn func(context.Context) error) error {
			return l.Lead(ctx, key("c2"), fn, shared, ormlock.WithKeepalive(short))
		})
		lead.waitHeld(t, "the Lead")
		killed = kill("a2")
		lead.lostWithin(t, "the Lead that joined later", killed, bound)
		if err := lead.returned(t, "the Lead"); err != nil {
			t.Errorf("the Lead, elected again and resigning: %v", err)
		}
		lost(a2, "the opener")
		for _, n := range []string{"a1", "b1", "a2", "b2", "c2"} {
			if !free(t, k, key(n)) {
				t.Errorf("key %s still held", n)
			}
		}
	})
}

// The server of a shared lock connection stops answering (PostgreSQL: its
// backend SIGSTOPped; MariaDB: a private server, SIGSTOPped whole).
//
// First a holder that joined with a 1 s keepalive a connection opened with
// 1 min learns of it within 1 s + max(2 s, 2 s). Then, with the
// connection's check stuck on the frozen server: a new Session with a
// 500 ms deadline, a Lead cancelled after 300 ms and the release of a
// holder whose deadline passed each return at most 1 s after their
// context ended (plus slack); the release that could not reach the
// connection destroys it, and its other holder learns of the loss within
// its own bound. Last, a new Session's try sent to the frozen server is cut
// 1 s after its deadline. Once the server resumes every lock is free.
func TestSharedLockConnsFrozenServer(t *testing.T) {
	leakcheck.Goroutines(t)
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		if testdb.LogPath(t, testdb.Postgres) == "" {
			t.Skip("the server is external (DSN env var): its backends are not processes of this machine")
		}
		for _, a := range adapters {
			t.Run(a.name, func(t *testing.T) {
				r := a.with(t, testdb.Postgres)
				sharedFrozen(t, a, r, "postgres", func(key string) func() {
					id, err := lockHolder(context.Background(), r, key)
					if err != nil {
						t.Fatal(err)
					}
					return faults.Freeze(t, int(id))
				})
			})
		}
	})
	t.Run("mariadb", func(t *testing.T) {
		t.Parallel()
		srv := testdb.Start(t, testdb.MariaDB)
		for _, a := range adapters {
			if a.name == "pgxlock" {
				continue // PostgreSQL only
			}
			t.Run(a.name, func(t *testing.T) {
				db, err := sql.Open("mysql", srv.DSN())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { srv.AssertNoLeaks(t, db); _ = db.Close() })
				r := a.on(t, "mysql", db)
				sharedFrozen(t, a, r, "mysql", func(string) func() { return faults.Freeze(t, srv.PID()) })
			})
		}
	})
}

func sharedFrozen(t *testing.T, a adapter, r runner, dialect string, freeze func(key string) (resume func())) {
	const slack = time.Second
	ctx := context.Background()
	l := leaderOf(t, a, r)
	shared := ormlock.WithSharedLockConns(1)
	key := func(s string) string { return "shf-" + s + "-" + a.name + "-" + dialect }
	session := func(ctx context.Context, name string, every time.Duration) *bgHold {
		h := holdBG(t, func(fn func(context.Context) error) error {
			return r.Session(ctx, key(name), fn, shared, ormlock.WithKeepalive(every))
		})
		h.waitHeld(t, "Session "+name)
		return h
	}
	// the server check (once per pool) before any freeze
	if err := r.Session(ctx, key("warm"), func(context.Context) error { return nil }, shared); err != nil {
		t.Fatal(err)
	}
	if err := l.Lead(ctx, key("warm"), func(context.Context) error { return nil }, shared); err != nil {
		t.Fatal(err)
	}

	// a joiner's bound, the opener's check far off
	const joinEvery = time.Second
	opener := session(ctx, "o", time.Minute)
	joiner := session(ctx, "j", joinEvery)
	resume := freeze(key("o"))
	frozen := time.Now()
	joiner.lostWithin(t, "the joiner (keepalive 1s)", frozen, joinEvery+max(2*joinEvery, 2*time.Second)+slack)
	resume()
	for _, h := range []*bgHold{joiner, opener} {
		if err := h.returned(t, "a Session on the frozen connection"); !errors.Is(err, ormlock.ErrLockLost) {
			t.Errorf("a Session on the frozen connection: %v, want ErrLockLost", err)
		}
	}
	releasedAfterThaw(t, r, key("o"))
	releasedAfterThaw(t, r, key("j"))

	// waits for a connection whose check is stuck
	const every = 2 * time.Second
	holder := session(ctx, "h", every)
	dctx, cancel := context.WithTimeout(ctx, every+time.Second)
	defer cancel()
	dl, _ := dctx.Deadline()
	late := session(dctx, "d", every)
	resume = freeze(key("h"))
	frozen = time.Now()
	time.Sleep(every + 300*time.Millisecond) // the check is under way, unanswered

	var wg sync.WaitGroup
	wg.Go(func() {
		nctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := r.Session(nctx, key("n"), func(context.Context) error { t.Error("fn ran on a frozen server"); return nil }, shared)
		faults.Within(t, "a new Session with a 500ms deadline", start, 500*time.Millisecond+time.Second+slack)
		if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a new Session with a 500ms deadline: %v, want ErrNotAcquired and DeadlineExceeded", err)
		}
	})
	wg.Go(func() {
		lctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(300*time.Millisecond, cancel)
		start := time.Now()
		err := l.Lead(lctx, key("l"), func(context.Context) error { t.Error("a Lead elected on a frozen server"); return nil }, shared)
		faults.Within(t, "a Lead cancelled after 300ms", start, 300*time.Millisecond+time.Second+slack)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("a Lead cancelled: %v, want context.Canceled", err)
		}
	})
	err := late.returned(t, "the Session whose deadline passed")
	if d := time.Since(dl); d > time.Second+slack {
		t.Errorf("the Session whose deadline passed returned %v after it, want within %v", d.Round(time.Millisecond), time.Second+slack)
	}
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ormlock.ErrNotAcquired) {
		t.Errorf("the Session whose deadline passed: %v, want DeadlineExceeded after the lock was taken", err)
	}
	wg.Wait()
	holder.lostWithin(t, "the other holder (keepalive 2s)", frozen, every+max(2*every, 2*time.Second)+slack)
	resume()
	if err := holder.returned(t, "the other holder"); !errors.Is(err, ormlock.ErrLockLost) {
		t.Errorf("the other holder: %v, want ErrLockLost", err)
	}
	for _, n := range []string{"h", "d", "n", "l"} {
		releasedAfterThaw(t, r, key(n))
	}

	// a try sent to the frozen server: cut 1 s after the caller's deadline,
	// which costs the connection
	holder = session(ctx, "h3", every)
	resume = freeze(key("h3"))
	frozen = time.Now()
	// SIGSTOP takes effect as each server thread next runs: let it, or a
	// try sent at once may still be answered
	time.Sleep(100 * time.Millisecond)
	nctx, ncancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer ncancel()
	start := time.Now()
	err = r.Session(nctx, key("n3"), func(context.Context) error { t.Error("fn ran on a frozen server"); return nil }, shared)
	faults.Within(t, "a new Session with a 500ms deadline, its try sent", start, 500*time.Millisecond+time.Second+slack)
	if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a new Session with a 500ms deadline, its try sent: %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	holder.lostWithin(t, "the holder (keepalive 2s)", frozen, every+max(2*every, 2*time.Second)+slack)
	resume()
	if err := holder.returned(t, "the holder"); !errors.Is(err, ormlock.ErrLockLost) {
		t.Errorf("the holder: %v, want ErrLockLost", err)
	}
	for _, n := range []string{"h3", "n3"} {
		releasedAfterThaw(t, r, key(n))
	}
}

// WithKeepalive has a floor of 10ms: a shorter interval (a nanosecond
// would make the checks a busy loop) is refused by every adapter's Session
// and Lead with ErrInvalidArgument naming the value, before anything is
// taken; the floor itself is accepted.
func TestKeepaliveFloor(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := a.with(t, k)
		l := leaderOf(t, a, r)
		ctx := context.Background()
		key := "ka-floor-" + a.name + "-" + string(k)
		fn := func(context.Context) error { t.Error("fn ran with a keepalive under the floor"); return nil }
		for _, d := range []time.Duration{time.Nanosecond, 9 * time.Millisecond} {
			for _, extra := range [][]ormlock.Option{nil, {ormlock.WithSharedLockConns(1)}} {
				if extra != nil && k == testdb.PgBouncer {
					continue
				}
				opts := append([]ormlock.Option{ormlock.WithKeepalive(d)}, extra...)
				for what, err := range map[string]error{
					"Session": r.Session(ctx, key, fn, opts...),
					"Lead":    l.Lead(ctx, key, fn, opts...),
				} {
					if !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), d.String()) {
						t.Errorf("%s with WithKeepalive(%v), %d more options: %v, want ErrInvalidArgument naming %v", what, d, len(extra), err, d)
					}
				}
			}
		}
		if !free(t, k, key) {
			t.Fatal("a refused call left the lock held")
		}
		if err := r.Session(ctx, key, func(context.Context) error { return nil }, ormlock.WithKeepalive(10*time.Millisecond)); err != nil {
			t.Fatalf("Session with the floor, 10ms: %v", err)
		}
	})
}
