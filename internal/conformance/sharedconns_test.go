package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/faults"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/leakcheck"
)

// forEachDirect runs f for every adapter on the servers with session-level
// locks: PostgreSQL (direct) and MariaDB.
func forEachDirect(t *testing.T, f func(t *testing.T, a adapter, k testdb.Kind)) {
	t.Helper()
	for _, a := range adapters {
		for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
			t.Run(a.name+"/"+string(k), func(t *testing.T) { f(t, a, k) })
		}
	}
}

// holdersOf asks the server which connection holds each of names' locks
// (0: none), in one statement.
func holdersOf(t *testing.T, k testdb.Kind, names []string) []int64 {
	t.Helper()
	ctx := context.Background()
	admin := testdb.AdminDB(t, k)
	out := make([]int64, len(names))
	if k.Dialect() == "mysql" {
		args := make([]any, len(names))
		q := "SELECT COALESCE(IS_USED_LOCK(?), 0)"
		for i, n := range names {
			args[i] = n
			if i > 0 {
				q += ", COALESCE(IS_USED_LOCK(?), 0)"
			}
		}
		dest := make([]any, len(names))
		for i := range out {
			dest[i] = &out[i]
		}
		if err := admin.QueryRowContext(ctx, q, args...).Scan(dest...); err != nil {
			t.Fatalf("IS_USED_LOCK: %v", err)
		}
		return out
	}
	type tag struct {
		classid, objid uint32
		sub            int
	}
	idx := map[tag]int{}
	for i, n := range names {
		c, o, s := lockproto.PGLockTag(keys.Postgres(keys.Name(n), ""))
		idx[tag{c, o, s}] = i
	}
	rows, err := admin.QueryContext(ctx, "SELECT classid::int8, objid::int8, objsubid, pid FROM pg_locks WHERE locktype = 'advisory' AND granted")
	if err != nil {
		t.Fatalf("pg_locks: %v", err)
	}
	defer rows.Close()
	for rows.Next() {
		var c, o int64
		var s int
		var pid int64
		if err := rows.Scan(&c, &o, &s, &pid); err != nil {
			t.Fatal(err)
		}
		if i, ok := idx[tag{uint32(c), uint32(o), s}]; ok {
			out[i] = pid
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// 1,000 Sessions of one process on distinct keys share 4 lock connections:
// each key excludes a second pool; the server counts at most 4 holders;
// one Session releases its key alone; one lock connection killed cancels
// exactly the Sessions it carried, with ErrLockLost, and no other.
func TestSharedLockConns(t *testing.T) {
	leakcheck.Goroutines(t)
	forEachDirect(t, func(t *testing.T, a adapter, k testdb.Kind) {
		const (
			n         = 1000
			conns     = 4
			keepalive = 200 * time.Millisecond
			bound     = 2*keepalive + 3*time.Second
		)
		r, other := a.with(t, k), a.with(t, k)
		owner := fmt.Sprintf("sh-owner-%s-%s", a.name, k)
		opts := []ormlock.Option{ormlock.WithSharedLockConns(conns), ormlock.WithKeepalive(keepalive), ormlock.WithOwner(owner)}
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("sh-%s-%s-%d", a.name, k, i)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// one Session first, so that the server check (once per pool) is
		// done before 1,000 callers ask for it at once
		if err := r.Session(ctx, "sh-warm", func(context.Context) error { return nil }, opts...); err != nil {
			t.Fatal(err)
		}
		type result struct {
			i   int
			err error
		}
		held := make(chan int, n)
		results := make(chan result, n)
		release := make([]chan struct{}, n)
		for i := range names {
			release[i] = make(chan struct{})
			go func() {
				err := r.Session(ctx, names[i], func(fctx context.Context) error {
					held <- i
					select {
					case <-fctx.Done():
						return fctx.Err()
					case <-release[i]:
						return nil
					}
				}, opts...)
				results <- result{i, err}
			}()
		}
		running := n
		defer func() {
			cancel()
			for ; running > 0; running-- {
				r := recv(t, results, 30*time.Second, "Session's return after cancel")
				if r.err != nil && !errors.Is(r.err, context.Canceled) {
					t.Errorf("Session %d after cancel: %v", r.i, r.err)
				}
			}
		}()
		for range n {
			select {
			case <-held:
			case r := <-results:
				running--
				t.Fatalf("Session %d returned before holding: %v", r.i, r.err)
			case <-time.After(60 * time.Second):
				t.Fatal("1,000 Sessions not all held within 60s")
			}
		}

		// the server sees every lock, on at most 4 connections
		holders := holdersOf(t, k, names)
		conn := map[int64]int{}
		for i, h := range holders {
			if h == 0 {
				t.Fatalf("lock %q not held on the server", names[i])
			}
			conn[h]++
		}
		if len(conn) > conns {
			t.Fatalf("%d server connections hold the locks, want at most %d", len(conn), conns)
		}
		if k.Dialect() == "postgres" {
			// the shared connections carry the owner as their
			// application_name: pg_stat_activity counts them
			var named int
			if err := testdb.AdminDB(t, k).QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", owner).Scan(&named); err != nil {
				t.Fatal(err)
			}
			if named != len(conn) {
				t.Errorf("pg_stat_activity shows %d connections named %q, want the %d lock connections", named, owner, len(conn))
			}
		} else {
			var listed int
			if err := testdb.AdminDB(t, k).QueryRowContext(ctx, "SELECT count(*) FROM information_schema.PROCESSLIST WHERE ID IN (SELECT DISTINCT IS_USED_LOCK(CONCAT(?, seq)) FROM seq_0_to_999)", "sh-"+a.name+"-"+string(k)+"-").Scan(&listed); err != nil {
				t.Fatal(err)
			}
			if listed != len(conn) {
				t.Errorf("information_schema.PROCESSLIST lists %d lock holders, want %d", listed, len(conn))
			}
		}
		if h, err := r.Holder(ctx, names[2]); err != nil || h.Owner != owner && k.Dialect() == "postgres" {
			t.Errorf("Holder(key 2) = %+v, %v; want owner %q", h, err, owner)
		}
		if st := r.Pool().Stats(); st.InUse > conns {
			t.Errorf("pool has %d connections in use, want at most %d", st.InUse, conns)
		}
		t.Logf("%d locks on %d server connections: %v", n, len(conn), conn)

		// every key excludes a second pool, shared or not, and raw SQL
		for i := 0; i < n; i += 97 {
			fn := func(context.Context) error { t.Errorf("key %d taken twice", i); return nil }
			if err := other.Session(ctx, names[i], fn, opts...); !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Fatalf("second pool, shared, key %d: %v, want ErrNotAcquired", i, err)
			}
			if err := other.Session(ctx, names[i], fn); !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Fatalf("second pool, dedicated, key %d: %v, want ErrNotAcquired", i, err)
			}
			if free(t, k, names[i]) {
				t.Fatalf("raw SQL took key %d", i)
			}
		}
		// and this process's own callers, even on the same connection
		if err := r.Session(ctx, names[1], func(context.Context) error { return nil }, opts...); !errors.Is(err, ormlock.ErrNotAcquired) {
			t.Fatalf("same pool, key 1 again: %v, want ErrNotAcquired", err)
		}

		// one Session releases its own key alone
		close(release[0])
		if got := recv(t, results, bound, "return of the released Session"); got.i != 0 || got.err != nil {
			t.Fatalf("released Session 0: got Session %d returning %v", got.i, got.err)
		}
		running--
		if !free(t, k, names[0]) {
			t.Fatal("key 0 still held after its Session returned")
		}

		// one lock connection killed: exactly its Sessions end, lost
		victim := holders[1]
		want := map[int]bool{}
		for i, h := range holders {
			if i != 0 && h == victim {
				want[i] = true
			}
		}
		testdb.Kill(t, k, victim)
		for len(want) > 0 {
			got := recv(t, results, bound, "return of a Session on the killed connection")
			running--
			if !want[got.i] {
				t.Fatalf("Session %d (on connection %d) ended: %v; only those on %d should", got.i, holders[got.i], got.err, victim)
			}
			if !errors.Is(got.err, ormlock.ErrLockLost) {
				t.Fatalf("Session %d on the killed connection: %v, want ErrLockLost", got.i, got.err)
			}
			if n := strings.Count(got.err.Error(), "ormlock: "); n != 1 {
				t.Fatalf("error says \"ormlock: \" %d times: %v", n, got.err)
			}
			delete(want, got.i)
		}
		select {
		case got := <-results:
			running--
			t.Fatalf("Session %d on a live connection ended: %v", got.i, got.err)
		case <-time.After(3 * keepalive):
		}
		testdb.WaitGone(t, k, victim)
		after := holdersOf(t, k, names)
		for i, h := range after {
			if i != 0 && holders[i] != victim && h != holders[i] {
				t.Fatalf("key %d moved from connection %d to %d", i, holders[i], h)
			}
		}
	})
}

// Behind a transaction-mode pooler, shared lock connections are refused
// before anything is taken.
func TestSharedLockConnsRefusedBehindPooler(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			k := testdb.PgBouncer
			r := a.with(t, k)
			l := leaderOf(t, a, r)
			ctx := context.Background()
			key := "sh-refused-" + a.name
			fn := func(context.Context) error { t.Error("fn called behind a pooler"); return nil }
			err := r.Session(ctx, key, fn, ormlock.WithSharedLockConns(2))
			if !errors.Is(err, ormlock.ErrUnsupportedDialect) {
				t.Fatalf("Session: %v, want ErrUnsupportedDialect", err)
			}
			t.Log(err)
			if err := l.Lead(ctx, key, fn, ormlock.WithSharedLockConns(2)); !errors.Is(err, ormlock.ErrUnsupportedDialect) {
				t.Fatalf("Lead: %v, want ErrUnsupportedDialect at once", err)
			}
			if !free(t, k, key) {
				t.Fatal("lock taken behind the pooler")
			}
		})
	}
}

// On shared lock connections a wait for a held key stalls nobody: another
// key is taken and released meanwhile on the same connection; the waiter
// gets its key soon after it is freed (its tries back off to at most the
// keepalive), and a waiter whose context is cancelled gives up with
// ErrNotAcquired and the context's error.
func TestSharedLockConnsWait(t *testing.T) {
	leakcheck.Goroutines(t)
	forEachDirect(t, func(t *testing.T, a adapter, k testdb.Kind) {
		const keepalive = 200 * time.Millisecond
		r := a.with(t, k)
		opts := []ormlock.Option{ormlock.WithSharedLockConns(1), ormlock.WithKeepalive(keepalive)}
		busy, other := "sh-wait-busy-"+string(k), "sh-wait-other-"+string(k)
		release := testdb.RawHold(t, k, "", busy)
		ctx := context.Background()
		got := make(chan time.Time, 1)
		waited := make(chan error, 1)
		go func() {
			waited <- r.Session(ctx, busy, func(context.Context) error {
				got <- time.Now()
				return nil
			}, append(opts, ormlock.WithWait(30*time.Second))...)
		}()
		for range 3 {
			if err := r.Session(ctx, other, func(context.Context) error { return nil }, opts...); err != nil {
				t.Fatalf("Session on a free key while another waits: %v", err)
			}
		}
		select {
		case err := <-waited:
			t.Fatalf("waiter returned while its key is held: %v", err)
		default:
		}
		release()
		freed := time.Now()
		at := recv(t, got, 2*keepalive+3*time.Second, "waiter's fn after the key was freed")
		if err := recv(t, waited, 5*time.Second, "waiter's return"); err != nil {
			t.Fatal(err)
		}
		t.Logf("waiter took its key %v after it was freed", at.Sub(freed).Round(time.Millisecond))

		// a waiter cancelled mid-try leaves the connection, and the lock
		// another Session holds on it, as they were
		release = testdb.RawHold(t, k, "", busy)
		defer release()
		holding, done := make(chan struct{}), make(chan struct{})
		kept := make(chan error, 1)
		go func() {
			kept <- r.Session(ctx, other, func(fctx context.Context) error {
				close(holding)
				select {
				case <-fctx.Done():
					return context.Cause(fctx)
				case <-done:
					return nil
				}
			}, opts...)
		}()
		recv(t, holding, 10*time.Second, "the other Session holding")
		for range 5 {
			cctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(50*time.Millisecond, cancel)
			err := r.Session(cctx, busy, func(context.Context) error { t.Error("fn called"); return nil }, append(opts, ormlock.WithWait(30*time.Second))...)
			if !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled wait: %v, want ErrNotAcquired and context.Canceled", err)
			}
		}
		close(done)
		if err := recv(t, kept, 5*time.Second, "the other Session's return"); err != nil {
			t.Fatalf("Session on the same connection as cancelled waits: %v", err)
		}
	})
}

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
