package lockproto_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

// Session, on a connection of its own and on shared lock connections,
// Holder and Lead, directly on the real servers.

// The lock is held while fn runs and only then, fn's error comes back, a
// panicking fn releases too, and Holder finds the holder.
func TestSessionHoldsWhileFnRuns(t *testing.T) {
	ctx := context.Background()
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		for _, shared := range []int{0, 2} {
			name := "own connection"
			if shared > 0 {
				name = "shared connections"
			}
			t.Run(name, func(t *testing.T) {
				db := testdb.Open(t, k)
				other := testdb.Open(t, k)
				t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db, other) })
				key := keys.Name(t.Name())
				var opts []ormlock.Option
				if shared > 0 {
					opts = append(opts, ormlock.WithSharedLockConns(shared))
				}
				op := newOp(t, k, key, opts...)
				if shared > 0 && k == testdb.PgBouncer {
					// no session-level lock behind a transaction-mode pooler
					err := op.Session(ctx, db, func(context.Context) error { t.Fatal("fn ran"); return nil })
					if !errors.Is(err, ormlock.ErrUnsupportedDialect) {
						t.Fatalf("Session: %v, want ErrUnsupportedDialect", err)
					}
					if !testdb.RawFree(t, k, "", t.Name()) {
						t.Fatal("a refused Session left the lock held")
					}
					return
				}
				want := errors.New("fn's error")
				err := op.Session(ctx, db, func(ctx context.Context) error {
					if err := newOp(t, k, key).Session(ctx, other, func(context.Context) error { return nil }); !errors.Is(err, ormlock.ErrNotAcquired) {
						t.Errorf("second Session while held: %v, want ErrNotAcquired", err)
					}
					h, err := lockproto.LookupHolder(ctx, testdb.AdminDB(t, k), newOp(t, k, key))
					if err != nil || !h.Held || h.PID == 0 {
						t.Errorf("Holder while held: %+v, %v", h, err)
					}
					return want
				})
				if !errors.Is(err, want) {
					t.Fatalf("Session: %v, want fn's error", err)
				}
				if h, err := lockproto.LookupHolder(ctx, testdb.AdminDB(t, k), newOp(t, k, key)); err != nil || h.Held {
					t.Fatalf("Holder after Session: %+v, %v", h, err)
				}
				func() {
					defer func() {
						if p := recover(); p != "fn panicked" {
							t.Fatalf("recovered %v", p)
						}
					}()
					_ = newOp(t, k, key, opts...).Session(ctx, db, func(context.Context) error { panic("fn panicked") })
				}()
				if !testdb.RawFree(t, k, "", t.Name()) {
					t.Fatal("the lock is held after a panicking fn")
				}
			})
		}
	})
}

// Several Sessions on shared lock connections hold their locks on at most
// that many connections of the pool.
func TestSharedLockConnsShareConnections(t *testing.T) {
	ctx := context.Background()
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
		t.Run(string(k), func(t *testing.T) {
			db := testdb.Open(t, k)
			t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
			const sessions = 4
			held := make(chan struct{}, sessions)
			release := make(chan struct{})
			errc := make(chan error, sessions)
			for i := range sessions {
				op := newOp(t, k, keys.ID(int64(i)+keyBase(t)), ormlock.WithSharedLockConns(1))
				go func() {
					errc <- op.Session(ctx, db, func(context.Context) error {
						held <- struct{}{}
						<-release
						return nil
					})
				}()
			}
			for range sessions {
				<-held
			}
			if n := db.Stats().InUse; n != 1 {
				t.Errorf("%d sessions hold %d connections, want 1", sessions, n)
			}
			close(release)
			for range sessions {
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// keyBase is a key range of the test's own.
func keyBase(t *testing.T) int64 {
	var b int64 = 1 << 40
	for _, c := range t.Name() {
		b = b*31 + int64(c)
	}
	return b &^ 0xff
}

// A Session whose lock connection is killed while fn runs: fn's context
// ends with cause ErrLockLost (the keepalive finds it), and Session
// returns an error wrapping ErrLockLost.
func TestSessionLockLost(t *testing.T) {
	ctx := context.Background()
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := testdb.Open(t, k)
		t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
		op := newOp(t, k, keys.Name(t.Name()), ormlock.WithKeepalive(100*time.Millisecond))
		err := op.Session(ctx, db, func(fctx context.Context) error {
			h, err := lockproto.LookupHolder(ctx, testdb.AdminDB(t, k), newOp(t, k, keys.Name(t.Name())))
			if err != nil || !h.Held {
				t.Fatalf("holder: %+v %v", h, err)
			}
			testdb.Kill(t, k, h.PID)
			select {
			case <-fctx.Done():
			case <-time.After(time.Minute):
				t.Fatal("fn's context did not end after its lock connection was killed")
			}
			if !errors.Is(context.Cause(fctx), ormlock.ErrLockLost) {
				t.Errorf("fn's context ended with %v, want ErrLockLost", context.Cause(fctx))
			}
			return fctx.Err()
		})
		if !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("Session: %v, want ErrLockLost", err)
		}
	})
}

// Lead: one leader at a time; when the leader resigns (fn returns), the
// campaigning candidate is elected; ctx's end stops a campaign.
func TestLeadOneAtATime(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := testdb.Open(t, k)
		other := testdb.Open(t, k)
		t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db, other) })
		key := keys.Name(t.Name())
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		elected := make(chan string, 2)
		resign := make(chan struct{})
		errc := make(chan error, 2)
		for _, c := range []struct {
			name string
			pool *sql.DB
		}{{"first", db}, {"second", other}} {
			op := newOp(t, k, key, ormlock.WithWait(time.Minute))
			go func() {
				errc <- op.Lead(ctx, c.pool, func(context.Context) error {
					elected <- c.name
					<-resign
					return nil
				})
			}()
			if c.name == "first" {
				if got := <-elected; got != "first" {
					t.Fatalf("elected %s", got)
				}
			}
		}
		select {
		case got := <-elected:
			t.Fatalf("%s elected while first leads", got)
		default:
		}
		resign <- struct{}{} // the first resigns: its Lead returns
		if err := <-errc; err != nil {
			t.Fatalf("resigned Lead: %v", err)
		}
		if got := <-elected; got != "second" {
			t.Fatalf("elected %s, want second", got)
		}
		cancel()
		close(resign)
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("Lead after ctx ended: %v", err)
		}
	})
}

// A Session that waits for its lock reads the session's
// idle_in_transaction_session_timeout from the last column of the lock
// message, not the lock_timeout the wait restores, so its keepalive runs
// within the timeout and the idle lock transaction survives a fn longer
// than it. Directly on PostgreSQL only: PgBouncer refuses the start-up
// parameter that sets the timeout here.
func TestSessionWaitIdleTimeout(t *testing.T) {
	k := testdb.Postgres
	db := openWithParam(t, k, "idle_in_transaction_session_timeout=1200")
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
	op, err := lockproto.NewOp(lockproto.Postgres, "Session", keys.Name(t.Name()), config.New(ormlock.WithWait(time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	err = op.Session(context.Background(), db, func(ctx context.Context) error {
		select {
		case <-time.After(3 * time.Second): // idle well past the 1.2 s timeout
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	if err != nil {
		t.Fatalf("Session over a 1.2 s idle timeout, with a wait: %v", err)
	}
}
