package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
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
