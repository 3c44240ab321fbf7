package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	_ "github.com/lib/pq"
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/gormtest"
	"github.com/ormlock/ormlock/pgxlock"
	"github.com/ormlock/ormlock/sqllock"
)

// A lock taken in a transaction the caller already has: sqllock.Lock on a
// *sql.Tx, pgxlock.Lock on a pgx.Tx, and gormlock's nested call (a
// Transaction on a *gorm.DB inside db.Transaction) with an fn that returns
// nil, whose lock then stays with the outer transaction as Lock's does. On
// PostgreSQL (and behind PgBouncer) the lock is held until the caller's
// transaction ends, and a failed attempt leaves that transaction usable; on
// MariaDB it is refused. Every pool is checked when its test ends: no lock
// left, no connection in use.

// nester opens an adapter's pool of kind k; the statements its
// connections send are counted in sent (PostgreSQL: pgx's tracer; not
// counted on MariaDB).
type nester struct {
	name string
	open func(t *testing.T, k testdb.Kind, sent *atomic.Int64) outerPool
	// verb: the adapter's Lock (not gormlock's nested Transaction)
	verb bool
	// pq: sqllock on lib/pq, whose statements are not counted, on
	// PostgreSQL only (PgBouncer's DSN names a setting of pgx's)
	pq bool
}

var nesters = []nester{
	{"sqllock", openSQLOuter, true, false},
	{"sqllock-pq", openPQOuter, true, true},
	{"pgxlock", openPgxOuter, true, false},
	{"gormlock", openGormOuter, false, false},
}

// outerPool begins the caller's transactions.
type outerPool interface {
	Begin(t *testing.T, opts *sql.TxOptions) outerTx
}

// outerTx is the caller's transaction.
type outerTx interface {
	// Lock takes key's lock in the transaction.
	Lock(ctx context.Context, key ormlock.Key, opts ...ormlock.Option) error
	// Scan runs query in the transaction into dest.
	Scan(query string, dest ...any) error
	Commit() error
	Rollback() error
}

// forNested runs f for every nester on every kind of kinds, the kinds of
// one nester in parallel.
func forNested(t *testing.T, kinds []testdb.Kind, f func(t *testing.T, n nester, k testdb.Kind)) {
	t.Helper()
	forKindsOf(t, nesters, func(n nester) string { return n.name }, kinds, func(t *testing.T, n nester, k testdb.Kind) {
		switch {
		case n.name == "pgxlock" && k.Dialect() != "postgres":
			t.Skip("pgxlock is PostgreSQL only")
		case n.pq && k != testdb.Postgres:
			t.Skip("lib/pq on PostgreSQL only")
		}
		f(t, n, k)
	})
}

var pgKinds = []testdb.Kind{testdb.Postgres, testdb.PgBouncer}

// counter is a pgx tracer that counts the statements sent.
type counter struct{ sent *atomic.Int64 }

func (c counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.sent.Add(1)
	return ctx
}

func (counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// countedSQL opens a database/sql pool of kind k whose statements count in
// sent on PostgreSQL, checked for leaks when the test ends.
func countedSQL(t *testing.T, k testdb.Kind, sent *atomic.Int64) *sql.DB {
	t.Helper()
	var db *sql.DB
	if k.Dialect() == "postgres" {
		cfg, err := pgx.ParseConfig(testdb.DSN(t, k))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Tracer = counter{sent}
		db = stdlib.OpenDB(*cfg)
		t.Cleanup(func() { db.Close() })
	} else {
		db = testdb.Open(t, k)
	}
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
	return db
}

// ---- sqllock ----

type sqlOuter struct{ db *sql.DB }

type sqlOuterTx struct{ tx *sql.Tx }

func openSQLOuter(t *testing.T, k testdb.Kind, sent *atomic.Int64) outerPool {
	return sqlOuter{countedSQL(t, k, sent)}
}

func (s sqlOuter) Begin(t *testing.T, opts *sql.TxOptions) outerTx {
	t.Helper()
	tx, err := s.db.BeginTx(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	return sqlOuterTx{tx}
}

func (s sqlOuterTx) Lock(ctx context.Context, key ormlock.Key, opts ...ormlock.Option) error {
	return sqllock.Lock(ctx, s.tx, key, opts...)
}

func (s sqlOuterTx) Scan(query string, dest ...any) error {
	return s.tx.QueryRow(query).Scan(dest...)
}

func (s sqlOuterTx) Commit() error   { return s.tx.Commit() }
func (s sqlOuterTx) Rollback() error { return s.tx.Rollback() }

func openPQOuter(t *testing.T, k testdb.Kind, _ *atomic.Int64) outerPool {
	t.Helper()
	db, err := sql.Open("postgres", testdb.DSN(t, k))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
	return sqlOuter{db}
}

// ---- pgxlock ----

type pgxOuter struct{ pool *pgxpool.Pool }

type pgxOuterTx struct{ tx pgx.Tx }

func openPgxOuter(t *testing.T, k testdb.Kind, sent *atomic.Int64) outerPool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testdb.DSN(t, k))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = counter{sent}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if n := pool.Stat().AcquiredConns(); n != 0 {
			t.Errorf("%d connection(s) of the pool still acquired", n)
		}
		pool.Close()
		testdb.AssertNoLeaks(t, k)
	})
	return pgxOuter{pool}
}

func (p pgxOuter) Begin(t *testing.T, opts *sql.TxOptions) outerTx {
	t.Helper()
	var o pgx.TxOptions
	if opts != nil {
		switch opts.Isolation {
		case sql.LevelRepeatableRead:
			o.IsoLevel = pgx.RepeatableRead
		case sql.LevelSerializable:
			o.IsoLevel = pgx.Serializable
		}
	}
	tx, err := p.pool.BeginTx(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return pgxOuterTx{tx}
}

func (p pgxOuterTx) Lock(ctx context.Context, key ormlock.Key, opts ...ormlock.Option) error {
	return pgxlock.Lock(ctx, p.tx, key, opts...)
}

func (p pgxOuterTx) Scan(query string, dest ...any) error {
	return p.tx.QueryRow(context.Background(), query).Scan(dest...)
}

func (p pgxOuterTx) Commit() error   { return p.tx.Commit(context.Background()) }
func (p pgxOuterTx) Rollback() error { return p.tx.Rollback(context.Background()) }

// ---- gormlock ----

type gormOuter struct{ db *gorm.DB }

type gormOuterTx struct{ tx *gorm.DB }

func openGormOuter(t *testing.T, k testdb.Kind, sent *atomic.Int64) outerPool {
	return gormOuter{gormtest.On(t, k.Dialect(), countedSQL(t, k, sent), gormtest.NoPing())}
}

func (g gormOuter) Begin(t *testing.T, opts *sql.TxOptions) outerTx {
	t.Helper()
	tx := g.db.Begin(opts)
	if tx.Error != nil {
		t.Fatal(tx.Error)
	}
	t.Cleanup(func() { tx.Rollback() })
	return gormOuterTx{tx}
}

func (g gormOuterTx) Lock(ctx context.Context, key ormlock.Key, opts ...ormlock.Option) error {
	return gormlock.Transaction(g.tx.WithContext(ctx), key, func(*gorm.DB) error { return nil }, opts...)
}

func (g gormOuterTx) Scan(query string, dest ...any) error {
	return g.tx.Raw(query).Row().Scan(dest...)
}

func (g gormOuterTx) Commit() error   { return g.tx.Commit().Error }
func (g gormOuterTx) Rollback() error { return g.tx.Rollback().Error }

// ---- helpers ----

// usable fails the test unless tx still runs statements (a PostgreSQL
// transaction that a failed statement aborted refuses them all).
func usable(t *testing.T, tx outerTx, after string) {
	t.Helper()
	var one int
	if err := tx.Scan("SELECT 1", &one); err != nil || one != 1 {
		t.Fatalf("after %s the transaction runs no statement: %v", after, err)
	}
}

// held fails the test unless hand-written SQL on another connection is
// refused each of names (held) or takes it (free).
func held(t *testing.T, k testdb.Kind, want bool, when string, names ...string) {
	t.Helper()
	for _, name := range names {
		if free(t, k, name) == want {
			t.Fatalf("%s: %q held = %v, want %v", when, name, !want, want)
		}
	}
}

// ---- the tests ----

// The lock is the caller's transaction's: held while it runs, by nobody
// once it commits or rolls back; another transaction's Lock of the key
// meanwhile returns ErrNotAcquired and leaves that transaction usable.
func TestNestedLockHeldUntilTxEnds(t *testing.T) {
	forNested(t, pgKinds, func(t *testing.T, n nester, k testdb.Kind) {
		p := n.open(t, k, new(atomic.Int64))
		ctx := context.Background()
		for _, end := range []string{"commit", "rollback"} {
			key := "nested-held-" + end + "-" + t.Name()
			tx := p.Begin(t, nil)
			if err := tx.Lock(ctx, ormlock.Name(key)); err != nil {
				t.Fatalf("Lock: %v", err)
			}
			held(t, k, true, "after Lock", key)
			other := p.Begin(t, nil)
			if err := other.Lock(ctx, ormlock.Name(key)); !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Fatalf("Lock in another transaction: %v, want ErrNotAcquired", err)
			}
			usable(t, other, "ErrNotAcquired")
			if err := other.Commit(); err != nil {
				t.Fatalf("commit after ErrNotAcquired: %v", err)
			}
			usable(t, tx, "Lock")
			held(t, k, true, "after more statements", key)
			if end == "commit" {
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
			} else if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			held(t, k, false, "after "+end, key)
		}
	})
}

// Held elsewhere: ErrNotAcquired, at once (try) or when the wait or the
// context's deadline runs out (which aborts what it ran in: the
// savepoint), and the transaction goes
// on, holding nothing of it; a wait the holder's release ends takes the
// lock.
func TestNestedLockNotAcquiredTxUsable(t *testing.T) {
	forNested(t, pgKinds, func(t *testing.T, n nester, k testdb.Kind) {
		p := n.open(t, k, new(atomic.Int64))
		ctx := context.Background()
		key := "nested-busy-" + t.Name()
		release := testdb.RawHold(t, k, "", key)
		tx := p.Begin(t, nil)
		usable(t, tx, "BEGIN")
		if err := tx.Lock(ctx, ormlock.Name(key)); !errors.Is(err, ormlock.ErrNotAcquired) {
			t.Fatalf("try: %v, want ErrNotAcquired", err)
		}
		usable(t, tx, "a refused try")
		if err := tx.Lock(ctx, ormlock.Name(key), ormlock.WithWait(200*time.Millisecond)); !errors.Is(err, ormlock.ErrNotAcquired) {
			t.Fatalf("wait: %v, want ErrNotAcquired", err)
		}
		usable(t, tx, "a wait that timed out")
		dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		if err := tx.Lock(dctx, ormlock.Name(key), ormlock.WithWait(30*time.Second)); !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("wait cut by the deadline: %v, want ErrNotAcquired and context.DeadlineExceeded", err)
		}
		usable(t, tx, "a wait cut by the deadline")
		release()
		held(t, k, false, "refused twice, the transaction still open", key)

		hold := testdb.RawHold(t, k, "", key)
		time.AfterFunc(100*time.Millisecond, hold)
		if err := tx.Lock(ctx, ormlock.Name(key), ormlock.WithWait(30*time.Second)); err != nil {
			t.Fatalf("wait for the release: %v", err)
		}
		held(t, k, true, "after the wait", key)
		if err := tx.Commit(); err != nil {
			t.Fatalf("commit: %v", err)
		}
		held(t, k, false, "after commit", key)
	})
}

// The shapes, in the caller's transaction: All holds every key, and an All
// refused at a later key gives back the earlier ones; Shared holders
// together, an exclusive one refused; a Semaphore's slots.
func TestNestedLockShapes(t *testing.T) {
	forNested(t, pgKinds, func(t *testing.T, n nester, k testdb.Kind) {
		p := n.open(t, k, new(atomic.Int64))
		ctx := context.Background()
		a, b := "nested-all-a-"+t.Name(), "nested-all-b-"+t.Name()

		tx := p.Begin(t, nil)
		if err := tx.Lock(ctx, ormlock.All(a, b)); err != nil {
			t.Fatalf("All: %v", err)
		}
		held(t, k, true, "All", a, b)
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		held(t, k, false, "All, rolled back", a, b)

		for _, wait := range []time.Duration{0, 200 * time.Millisecond} {
			release := testdb.RawHold(t, k, "", b)
			tx = p.Begin(t, nil)
			if err := tx.Lock(ctx, ormlock.All(a, b), ormlock.WithWait(wait)); !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Fatalf("All with %s held (wait %v): %v, want ErrNotAcquired", b, wait, err)
			}
			usable(t, tx, "a refused All")
			held(t, k, false, "a refused All, the transaction still open", a)
			release()
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}

		s := "nested-shared-" + t.Name()
		r1, r2, w := p.Begin(t, nil), p.Begin(t, nil), p.Begin(t, nil)
		for i, tx := range []outerTx{r1, r2} {
			if err := tx.Lock(ctx, ormlock.Shared(s)); err != nil {
				t.Fatalf("Shared, reader %d: %v", i+1, err)
			}
		}
		if err := w.Lock(ctx, ormlock.Name(s)); !errors.Is(err, ormlock.ErrNotAcquired) {
			t.Fatalf("exclusive beside two Shared: %v, want ErrNotAcquired", err)
		}
		usable(t, w, "an exclusive lock refused")
		for _, tx := range []outerTx{r1, r2, w} {
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		held(t, k, false, "Shared, committed", s)

		sem := ormlock.Semaphore("nested-sem-"+t.Name(), 2)
		txs := []outerTx{p.Begin(t, nil), p.Begin(t, nil), p.Begin(t, nil)}
		for i, tx := range txs[:2] {
			if err := tx.Lock(ctx, sem); err != nil {
				t.Fatalf("Semaphore, holder %d: %v", i+1, err)
			}
		}
		if err := txs[2].Lock(ctx, sem, ormlock.WithWait(100*time.Millisecond)); !errors.Is(err, ormlock.ErrNotAcquired) {
			t.Fatalf("a third holder of Semaphore(2): %v, want ErrNotAcquired", err)
		}
		usable(t, txs[2], "a full semaphore")
		if err := txs[0].Commit(); err != nil {
			t.Fatal(err)
		}
		if err := txs[2].Lock(ctx, sem); err != nil {
			t.Fatalf("a slot freed by a commit: %v", err)
		}
		for _, tx := range txs[1:] {
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// Above READ COMMITTED the transaction's snapshot predates the lock:
// refused with ErrInvalidArgument, nothing taken, the transaction usable.
func TestNestedLockSnapshotIsolationRefused(t *testing.T) {
	forNested(t, pgKinds, func(t *testing.T, n nester, k testdb.Kind) {
		p := n.open(t, k, new(atomic.Int64))
		key := "nested-iso-" + t.Name()
		for _, level := range []sql.IsolationLevel{sql.LevelRepeatableRead, sql.LevelSerializable} {
			tx := p.Begin(t, &sql.TxOptions{Isolation: level})
			if err := tx.Lock(context.Background(), ormlock.Name(key)); !errors.Is(err, ormlock.ErrInvalidArgument) {
				t.Fatalf("%v: %v, want ErrInvalidArgument", level, err)
			}
			held(t, k, false, "refused", key)
			usable(t, tx, "the refusal")
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// MariaDB: a named lock outlives the transaction, so the call is refused
// with ErrUnsupportedDialect (gormlock's ErrNestedTransaction matches it
// too), nothing taken, the transaction usable.
func TestNestedLockMariaDBRefused(t *testing.T) {
	forNested(t, []testdb.Kind{testdb.MariaDB}, func(t *testing.T, n nester, k testdb.Kind) {
		p := n.open(t, k, new(atomic.Int64))
		key := "nested-mysql-" + t.Name()
		tx := p.Begin(t, nil)
		err := tx.Lock(context.Background(), ormlock.Name(key))
		if !errors.Is(err, ormlock.ErrUnsupportedDialect) {
			t.Fatalf("Lock on MariaDB: %v, want ErrUnsupportedDialect", err)
		}
		if n.name == "gormlock" && !errors.Is(err, gormlock.ErrNestedTransaction) {
			t.Fatalf("gormlock nested on MariaDB: %v, want ErrNestedTransaction too", err)
		}
		held(t, k, false, "refused", key)
		usable(t, tx, "the refusal")
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	})
}

// Refused before anything is sent: a bad key (ErrInvalidKey), an ended
// context (ErrNotAcquired and the context's error), and Lock's options it
// cannot honour in the caller's transaction (ErrInvalidArgument, on every
// server); the transaction then takes the lock on a live context.
func TestNestedLockRefusedBeforeSending(t *testing.T) {
	forNested(t, testdb.Kinds(), func(t *testing.T, n nester, k testdb.Kind) {
		sent := new(atomic.Int64)
		p := n.open(t, k, sent)
		key := "nested-early-" + t.Name()
		tx := p.Begin(t, nil)
		usable(t, tx, "BEGIN")
		ended, cancel := context.WithCancel(context.Background())
		cancel()
		before := sent.Load()
		if err := tx.Lock(context.Background(), ormlock.Name("")); !errors.Is(err, ormlock.ErrInvalidKey) {
			t.Errorf("empty name: %v, want ErrInvalidKey", err)
		}
		if err := tx.Lock(ended, ormlock.Name(key)); !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Errorf("ended context: %v, want ErrNotAcquired and context.Canceled", err)
		}
		if n.verb {
			for name, opt := range map[string]ormlock.Option{
				"WithFencing":   ormlock.WithFencing(),
				"WithTxOptions": ormlock.WithTxOptions(&sql.TxOptions{}),
				"WithClaim":     ormlock.WithClaim(),
				"WithCatchUp":   ormlock.WithCatchUp(time.Hour, ormlock.CatchUpLatest),
			} {
				if err := tx.Lock(context.Background(), ormlock.Name(key), opt); !errors.Is(err, ormlock.ErrInvalidArgument) {
					t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
				}
			}
		}
		if d := sent.Load() - before; d != 0 {
			t.Errorf("%d statement(s) sent by refused calls, want none", d)
		}
		if k.Dialect() != "postgres" {
			return
		}
		usable(t, tx, "the refusals")
		before = sent.Load()
		if err := tx.Lock(context.Background(), ormlock.Name(key)); err != nil {
			t.Fatalf("on a live context: %v", err)
		}
		if sent.Load() == before && !n.pq {
			t.Fatal("no statement counted for a Lock on a live context: the count sees nothing")
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	})
}

// The observer's events and the hook's Start and End, as the other verbs
// emit them, with Verb "Lock": the lock ends with the caller's
// transaction, after Lock returned, so no released event follows.
func TestNestedLockEvents(t *testing.T) {
	forNested(t, pgKinds, func(t *testing.T, n nester, k testdb.Kind) {
		if !n.verb {
			t.Skip("gormlock's nested call is a Transaction")
		}
		p := n.open(t, k, new(atomic.Int64))
		ctx := context.Background()
		key := "nested-events-" + t.Name()
		h, rec := &hook{}, &testdb.Recorder{}
		opts := []ormlock.Option{ormlock.WithHook(h), ormlock.WithObserver(rec)}
		tx := p.Begin(t, nil)
		if err := tx.Lock(ctx, ormlock.Name(key), opts...); err != nil {
			t.Fatal(err)
		}
		h.take(t, "Lock", ormlock.EventAcquired, nil)
		for _, e := range rec.Events() {
			if e.Verb != "Lock" || e.Server != "postgresql" {
				t.Errorf("event %v: Verb %q, Server %q; want Lock, postgresql", e.Kind, e.Verb, e.Server)
			}
		}
		if got := rec.Take(); got != "attempt,acquired" {
			t.Errorf("Lock: observer saw %s", got)
		}
		other := p.Begin(t, nil)
		if err := other.Lock(ctx, ormlock.Name(key), opts...); !errors.Is(err, ormlock.ErrNotAcquired) {
			t.Fatalf("held: %v", err)
		}
		h.take(t, "Lock, held", ormlock.EventNotAcquired, ormlock.ErrNotAcquired)
		if got := rec.Take(); got != "attempt,not_acquired" {
			t.Errorf("Lock, held: observer saw %s", got)
		}
		for _, tx := range []outerTx{tx, other} {
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// pgxlock asks the server to cancel a wait whose context is cancelled: the
// connection, and with it the caller's transaction, stays usable.
func TestNestedLockCancelledWaitPgx(t *testing.T) {
	for _, k := range pgKinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			p := openPgxOuter(t, k, new(atomic.Int64))
			key := "nested-cancel-" + t.Name()
			testdb.RawHold(t, k, "", key)
			tx := p.Begin(t, nil)
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(200*time.Millisecond, cancel)
			if err := tx.Lock(ctx, ormlock.Name(key), ormlock.WithWait(30*time.Second)); !errors.Is(err, ormlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled wait: %v, want ErrNotAcquired and context.Canceled", err)
			}
			usable(t, tx, "a cancelled wait")
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// On a PostgreSQL hot standby, whose advisory locks exclude no client of
// the primary, Lock is refused with ErrUnsupportedDialect naming it: Lock
// reaches no pool to check once, so its own check, in the caller's
// transaction, asks at every call.
func TestNestedLockStandbyRefused(t *testing.T) {
	primary := testdb.Start(t, testdb.Postgres)
	standby := primary.StartStandby(t)
	db, err := sql.Open("pgx", standby.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	pool, err := pgxpool.New(context.Background(), standby.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	for _, o := range []outerPool{sqlOuter{db}, pgxOuter{pool}} {
		for _, what := range []string{"first call", "again"} {
			tx := o.Begin(t, nil)
			err := tx.Lock(context.Background(), ormlock.Name("nested-standby"))
			if !errors.Is(err, ormlock.ErrUnsupportedDialect) || !strings.Contains(err.Error(), "hot standby") {
				t.Errorf("%T, %s on a standby: %v; want ErrUnsupportedDialect naming the hot standby", o, what, err)
			}
			usable(t, tx, "the refusal")
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
		}
	}
	standby.AssertNoLeaks(t, db)
}
