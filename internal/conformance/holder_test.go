package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
)

// connIDQuery returns the server connection id: pg_backend_pid() or
// CONNECTION_ID().
func connIDQuery(k testdb.Kind) string {
	if k.Dialect() == "postgres" {
		return "SELECT pg_backend_pid()"
	}
	return "SELECT CONNECTION_ID()"
}

// killConn terminates tx's own server connection and waits until it is
// gone; it returns the error of reading the connection's id.
func killConn(t *testing.T, k testdb.Kind, tx txn) error {
	t.Helper()
	id, err := queryInt(tx, connIDQuery(k))
	if err != nil {
		return err
	}
	testdb.Kill(t, k, id)
	testdb.WaitGone(t, k, id)
	return nil
}

// holderOf asks r who holds key and checks the answer names its dialect and
// lock.
func holderOf(t *testing.T, r runner, key any, opts ...ormlock.Option) ormlock.HolderInfo {
	t.Helper()
	h, err := r.Holder(context.Background(), key, opts...)
	if err != nil {
		t.Fatalf("Holder(%v): %v", key, err)
	}
	if h.Dialect == "" || h.Lock == "" {
		t.Errorf("Holder(%v) without Dialect/Lock: %+v", key, h)
	}
	return h
}

// Holder names the connection that holds a lock while a verb holds it, and
// nobody once it is released.
func TestConformanceHolder(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r := openRunner(t, a, k)
		key := "conf-holder-" + t.Name()
		if h, err := r.Holder(ctx, key); err != nil || h.Held {
			t.Fatalf("free lock: Holder = %+v, %v", h, err)
		}
		var inside ormlock.HolderInfo
		err := r.Session(ctx, key, func(context.Context) error {
			var err error
			inside, err = openRunner(t, a, k).Holder(ctx, key)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if !inside.Held || inside.PID == 0 {
			t.Fatalf("held lock: Holder = %+v, want held with a pid", inside)
		}
		if h, err := r.Holder(ctx, key); err != nil || h.Held {
			t.Fatalf("released lock: Holder = %+v, %v", h, err)
		}
	})
}

func TestHolderFree(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		for _, key := range []ormlock.Key{ormlock.Name("holder-free-" + t.Name()), ormlock.ID(keyhash.Int64("holder-free-id-" + t.Name())), ormlock.Pair(-3, 77)} {
			h := holderOf(t, r, key)
			if h.Held || h.PID != 0 || h.User != "" || h.Waiters != 0 || !h.TxStart.IsZero() || h.String() != "free" || h.Dialect != k.Dialect() {
				t.Errorf("%v: free lock reported as %+v", key, h)
			}
		}
	})
}

func TestHolderTransaction(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		key := "holder-tx-" + t.Name()
		var h ormlock.HolderInfo
		var pid int64
		err := r.Transaction(context.Background(), key, func(tx txn) error {
			var err error
			if pid, err = queryInt(tx, connIDQuery(k)); err != nil {
				return err
			}
			time.Sleep(10 * time.Millisecond)
			h, err = r.Holder(context.Background(), key) // through the pool, another connection
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("holder seen from another connection: %s (lock %s)", h, h.Lock)
		if !h.Held || h.PID != pid {
			t.Fatalf("Holder = %+v, want held by the transaction's connection %d", h, pid)
		}
		if h.User == "" || h.ClientAddr == "" || h.Database == "" || h.State == "" {
			t.Errorf("holder details missing: %+v", h)
		}
		if want := map[string]string{"postgres": "advisory", "mysql": "named"}[k.Dialect()]; h.Mechanism != want || h.Epoch != 0 || h.ExpiresIn != 0 {
			t.Errorf("Mechanism %q epoch %d expires in %v, want %q and no lease's", h.Mechanism, h.Epoch, h.ExpiresIn, want)
		}
		if k.Dialect() == "postgres" {
			if h.State != "idle in transaction" || h.TxStart.IsZero() || h.ConnStart.IsZero() || h.Mode != "ExclusiveLock" {
				t.Errorf("postgres details: %+v", h)
			}
			if !strings.Contains(h.Query, "pg_backend_pid") {
				t.Errorf("query = %q, want the holder's last statement", h.Query)
			}
			// HeldFor runs from the transaction's start, which precedes the
			// lock call and the 10ms sleep inside fn
			if h.HeldFor <= 0 {
				t.Errorf("HeldFor = %v", h.HeldFor)
			}
			want := keyhash.Int64(key)
			wantLock := fmt.Sprintf("classid=%d objid=%d objsubid=1", uint32(uint64(want)>>32), uint32(want))
			if h.Lock != wantLock {
				t.Errorf("Lock = %q, want %q", h.Lock, wantLock)
			}
		} else if h.State != "Sleep" || h.Lock != keyhash.MySQLName("", key) {
			t.Errorf("mariadb details: %+v", h)
		}
		if h := holderOf(t, r, key); h.Held {
			t.Fatalf("still held after Transaction: %v", h)
		}
	})
}

// The adapter's default namespace (GORM's plugin, entlock.Wrap) applies to
// Holder, and a per-call one overrides it.
func TestHolderNamespace(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := a.with(t, k, ormlock.WithNamespace("holderns"))
		key := "holder-ns-" + t.Name()
		err := r.Transaction(context.Background(), key, func(tx txn) error {
			pid, err := queryInt(tx, connIDQuery(k))
			if err != nil {
				return err
			}
			if h := holderOf(t, r, key); !h.Held || h.PID != pid {
				return fmt.Errorf("with the default namespace: %v, want pid %d", h, pid)
			}
			if h := holderOf(t, r, key, ormlock.WithNamespace("holderns")); !h.Held || h.PID != pid {
				return fmt.Errorf("with the namespace per call: %v", h)
			}
			if h := holderOf(t, r, key, ormlock.WithNamespace("")); h.Held {
				return fmt.Errorf("without the namespace, another key, yet held: %v", h)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// Numeric keys: the pg_locks coordinates of a bigint (classid high half,
// objid low half, objsubid 1) and of a pair (objsubid 2), with negative
// halves, which pg_locks shows as unsigned oids.
func TestHolderNumericKeys(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		base := keyhash.Int64("holder-num-" + t.Name())
		keys := []ormlock.Key{
			ormlock.ID(base | -1<<63 | 1<<31), // both halves with the high bit set
			ormlock.ID(base &^ (-1 << 63) &^ (1 << 31)),
			ormlock.Pair(-7, int32(base)|-1<<31),
			ormlock.Pair(7, int32(base)&0x7fffffff),
		}
		for _, key := range keys {
			err := r.Transaction(context.Background(), key, func(tx txn) error {
				pid, err := queryInt(tx, connIDQuery(k))
				if err != nil {
					return err
				}
				if h := holderOf(t, r, key); !h.Held || h.PID != pid {
					return fmt.Errorf("%v: %v, want pid %d", key, h, pid)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if k.Dialect() != "postgres" {
			return
		}
		// a bigint whose halves equal a pair's is a different lock
		err := r.Transaction(context.Background(), ormlock.ID(7<<32|9), func(txn) error {
			if h := holderOf(t, r, ormlock.Pair(7, 9)); h.Held {
				return fmt.Errorf("pair (7,9) reported held by the bigint 7<<32|9: %v", h)
			}
			if h := holderOf(t, r, ormlock.ID(7<<32|9)); !h.Held || h.Lock != "classid=7 objid=9 objsubid=1" {
				return fmt.Errorf("bigint: %v %q", h, h.Lock)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// The reported holder of a Session is its lock connection, not fn's:
// ending it makes the Session lose its lock.
func TestHolderSession(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		key := "holder-sess-" + t.Name()
		err := r.Session(context.Background(), key, func(ctx context.Context) error {
			h, err := r.Holder(ctx, key)
			if err != nil {
				return err
			}
			t.Logf("Session's lock connection: %s", h)
			if !h.Held || h.PID == 0 {
				return fmt.Errorf("holder %+v", h)
			}
			want := "Sleep"
			if k.Dialect() == "postgres" {
				want = "idle in transaction"
			}
			// Between its keepalive checks the lock connection is idle. A
			// check caught in flight shows its statement's state instead
			// (MariaDB: "Execute (Writing to net)" while the reply is
			// sent, longer on a loaded machine), so sample until an idle
			// moment is seen: the keepalive's 1 s interval leaves the
			// connection idle nearly all the time.
			deadline := time.Now().Add(10 * time.Second)
			for h.State != want && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
				if h, err = r.Holder(ctx, key); err != nil {
					return err
				}
			}
			if h.State != want {
				return fmt.Errorf("state %q, want %q", h.State, want)
			}
			// the session's lock connection is not fn's: a statement of fn
			// runs on another one
			var own int64
			err = r.Transaction(ctx, key+"-other", func(tx txn) error {
				own, err = queryInt(tx, connIDQuery(k))
				return err
			})
			if err != nil || own == h.PID {
				return fmt.Errorf("fn's connection %d vs holder %d: %v", own, h.PID, err)
			}
			// the reported connection is the one that holds the lock: end
			// it and the Session loses its lock
			testdb.Kill(t, k, h.PID)
			return awaitLoss(ctx)
		}, ormlock.WithKeepalive(time.Second))
		if !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("err = %v, want ErrLockLost after ending the reported holder", err)
		}
	})
}

// A lock taken by hand-written SQL, as existing code would.
func TestHolderRawSQL(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		key := "holder-raw-" + t.Name()
		ctx := context.Background()
		pool := testdb.Open(t, k)
		t.Cleanup(func() { testdb.AssertNoLeaks(t, k, pool) })
		conn, err := pool.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var pid int64
		if err := conn.QueryRowContext(ctx, connIDQuery(k)).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		if k.Dialect() == "postgres" {
			// session-level through PgBouncer would not stick to one
			// server connection: hold it in a transaction there
			if k == testdb.PgBouncer {
				tx, err := conn.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback()
				if err := tx.QueryRowContext(ctx, connIDQuery(k)).Scan(&pid); err != nil {
					t.Fatal(err)
				}
				if _, err = tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", keyhash.Int64(key)); err != nil {
					t.Fatal(err)
				}
			} else {
				if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", keyhash.Int64(key)); err != nil {
					t.Fatal(err)
				}
				defer conn.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", keyhash.Int64(key))
			}
		} else {
			name := keyhash.MySQLName("", key)
			var ok bool
			if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0) = 1", name).Scan(&ok); err != nil || !ok {
				t.Fatalf("GET_LOCK: %v %v", ok, err)
			}
			defer conn.ExecContext(ctx, "SELECT RELEASE_LOCK(?)", name)
		}
		h := holderOf(t, r, key)
		t.Logf("raw holder: %s", h)
		if !h.Held || h.PID != pid {
			t.Fatalf("Holder = %+v, want pid %d", h, pid)
		}
		if k == testdb.Postgres && (h.State != "idle" || !h.TxStart.IsZero() || h.HeldFor <= 0) {
			// a session-level lock outside a transaction: HeldFor runs
			// from the connection's start
			t.Errorf("session-level holder: %+v", h)
		}
	})
}

// Sessions queued with WithWait show up as Waiters on PostgreSQL.
func TestHolderWaitersPostgres(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r, waiter := openRunner(t, a, k), a.open(t, k)
		key := "holder-wait-" + t.Name()
		ctx := context.Background()
		done := make(chan error, 1)
		err := r.Transaction(ctx, key, func(txn) error {
			go func() {
				done <- waiter.Transaction(ctx, key, func(txn) error { return nil }, ormlock.WithWait(30*time.Second))
			}()
			deadline := time.Now().Add(10 * time.Second)
			for {
				h := holderOf(t, r, key)
				if !h.Held {
					return fmt.Errorf("not held: %v", h)
				}
				if h.Waiters == 1 {
					t.Logf("with one waiter: %s", h)
					return nil
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("waiter not seen within 10s: %v", h)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
		werr := <-done // the waiter gets the lock once fn has returned
		if err != nil {
			t.Fatal(err)
		}
		if werr != nil {
			t.Fatalf("waiter: %v", werr)
		}
	})
}

// Bad input to Holder, the same on every adapter; the adapters test their
// own (a nil handle, a nil context, a transactional client).
func TestHolderBadInput(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			r := openRunner(t, a, testdb.Postgres)
			ctx := context.Background()
			for _, c := range []struct {
				name string
				key  any
				opts []ormlock.Option
				text string
			}{
				{"empty key", "", nil, "empty"},
				{"zero Key", ormlock.Key{}, nil, "zero Key"},
				{"bad namespace", "k", []ormlock.Option{ormlock.WithNamespace("a:b")}, "namespace"},
			} {
				_, err := r.Holder(ctx, c.key, c.opts...)
				if !errors.Is(err, ormlock.ErrInvalidKey) || !strings.Contains(err.Error(), c.text) || !strings.HasPrefix(err.Error(), "ormlock: ") {
					t.Errorf("%s: %v, want ErrInvalidKey mentioning %q", c.name, err, c.text)
				}
			}
		})
	}
}

// HeldFor counts from the acquisition, not from the start of the lock
// transaction: a Session that waited on the server (WithWait, as a Lead's
// campaign does) for over a second reports, from its first moment on and
// after its keepalives, no more than the time since it got the lock (plus
// slack), whatever the wait before it.
func TestHolderHeldForExcludesTheWait(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		ctx := context.Background()
		key := "heldfor-" + a.name + "-" + string(k)
		const wait = 1500 * time.Millisecond
		const slack = 500 * time.Millisecond

		heldA, releaseA := make(chan struct{}), make(chan struct{})
		errA := make(chan error, 1)
		go func() {
			errA <- r.Session(ctx, key, func(context.Context) error {
				close(heldA)
				<-releaseA
				return nil
			})
		}()
		<-heldA

		heldB, releaseB := make(chan time.Time, 1), make(chan struct{})
		errB := make(chan error, 1)
		go func() {
			errB <- r.Session(ctx, key, func(context.Context) error {
				heldB <- time.Now()
				<-releaseB
				return nil
			}, ormlock.WithWait(time.Minute), ormlock.WithKeepalive(250*time.Millisecond))
		}()
		// B waits on the server, inside its lock transaction
		deadline := time.Now().Add(10 * time.Second)
		for {
			h, err := r.Holder(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if h.Waiters == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("B does not wait: %s", h)
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(wait)
		close(releaseA)
		if err := <-errA; err != nil {
			t.Fatal(err)
		}
		acquired := <-heldB
		check := func(when string) {
			t.Helper()
			h, err := r.Holder(ctx, key)
			since := time.Since(acquired)
			if err != nil || !h.Held {
				t.Fatalf("%s: Holder = %s, %v", when, h, err)
			}
			if h.HeldFor <= 0 || h.HeldFor > since+slack {
				t.Errorf("%s: held_for=%v, %v after the acquisition, which came after a wait of over %v: %s", when, h.HeldFor, since, wait, h)
			}
		}
		check("at once")
		time.Sleep(800 * time.Millisecond) // past a few keepalives
		check("after keepalives")
		close(releaseB)
		if err := <-errB; err != nil {
			t.Fatal(err)
		}
	})
}

// lockCtx is the context fn's work uses, the one ormlock.Held reads:
// gormlock's tx.Statement.Context, sqllock's and pgxlock's fn ctx, and
// entlock.Context(tx) (ent's fn gets no context).
func lockCtx(tx txn) context.Context {
	if e, ok := tx.(entTx); ok {
		return entlock.Context(e.tx)
	}
	return tx.Context()
}

// TestHeld: ormlock.Held is true while fn runs with the lock held, in every
// verb of every adapter on every server, and false for a context no verb
// made, after the verb returned, and once a Session's lock is lost (its
// backend killed); entlock.Held(tx) is its twin on ent's transaction.
func TestHeld(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		var none context.Context // a nil context says no
		if ormlock.Held(ctx) || ormlock.Held(none) {
			t.Fatal("Held of a context no verb made")
		}
		r := openRunner(t, a, k)
		key := "conf-held-" + t.Name()
		var after context.Context
		if err := r.Transaction(ctx, key, func(tx txn) error {
			after = lockCtx(tx)
			if !ormlock.Held(after) {
				t.Error("Transaction: Held is false in fn")
			}
			if e, ok := tx.(entTx); ok && !entlock.Held(e.tx) {
				t.Error("Transaction: entlock.Held is false in fn")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if ormlock.Held(after) {
			t.Error("Transaction: Held is true after the verb returned")
		}
		if err := r.Session(ctx, key, func(ctx context.Context) error {
			after = ctx
			if !ormlock.Held(ctx) {
				t.Error("Session: Held is false in fn")
			}
			// a nested verb answers for its own lock, and the outer
			// one's context still says held
			return r.Session(ctx, key+"-inner", func(inner context.Context) error {
				if !ormlock.Held(inner) || !ormlock.Held(ctx) {
					t.Error("nested Session: Held is false")
				}
				return nil
			})
		}); err != nil {
			t.Fatal(err)
		}
		if ormlock.Held(after) {
			t.Error("Session: Held is true after the verb returned")
		}
		if ld, ok := r.(leader); ok {
			lctx, cancel := context.WithCancel(ctx)
			err := ld.Lead(lctx, key, func(ctx context.Context) error {
				after = ctx
				if !ormlock.Held(ctx) {
					t.Error("Lead: Held is false in fn")
				}
				cancel()
				return nil
			})
			cancel()
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("Lead: %v", err)
			}
			if ormlock.Held(after) {
				t.Error("Lead: Held is true after the verb returned")
			}
		}
		tbl := ledgerTable(t, k, r)
		for _, claim := range []bool{false, true} {
			opts := []ormlock.Option{ormlock.WithLedgerTable(tbl)}
			if claim {
				opts = append(opts, ormlock.WithClaim())
			}
			if err := r.RunOnce(ctx, "held-"+t.Name(), testdb.Slot(map[bool]int{false: 0, true: 1}[claim]), func(tx txn) error {
				if !ormlock.Held(lockCtx(tx)) {
					t.Errorf("RunOnce (claim %v): Held is false in fn", claim)
				}
				return nil
			}, opts...); err != nil {
				t.Fatal(err)
			}
		}

		// a lost lock: Held says no once fn's context ends
		lost := "conf-held-lost-" + t.Name()
		err := r.Session(ctx, lost, func(ctx context.Context) error {
			if !ormlock.Held(ctx) {
				t.Error("Session before the loss: Held is false")
			}
			if err := killHolder(ctx, t, k, r, lost); err != nil {
				return err
			}
			if err := awaitLoss(ctx); err != nil && ctx.Err() == nil {
				return err
			}
			if ormlock.Held(ctx) {
				t.Error("Session after the loss: Held is true")
			}
			return nil
		}, ormlock.WithKeepalive(200*time.Millisecond))
		if !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("lost Session: %v, want ErrLockLost", err)
		}
	})
}
