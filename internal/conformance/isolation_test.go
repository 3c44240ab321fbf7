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
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
)

// isolations are the levels above READ COMMITTED, where PostgreSQL takes a
// transaction's snapshot at its first statement.
var isolations = []struct {
	name  string
	level sql.IsolationLevel
}{
	{"RepeatableRead", sql.LevelRepeatableRead},
	{"Serializable", sql.LevelSerializable},
}

// next is the critical section: read owner's largest n, insert n+1.
func next(tx txn, owner string) error { return nextHeld(tx, owner, nil, 0) }

// nextHeld is next for the first of two holders: once it holds the lock and
// has read, it signals started and keeps the lock for hold, so that the
// second holder's wait overlaps it.
func nextHeld(tx txn, owner string, started *startSignal, hold time.Duration) error {
	top, err := queryInt(tx, "SELECT COALESCE(MAX(n), 0) FROM items WHERE "+ofOwner(owner))
	if err != nil {
		return err
	}
	if started != nil {
		started.close()
		time.Sleep(hold) // the overlap, not the order: started orders them
	}
	return tx.Insert(owner, int(top)+1)
}

// startSignal is the first holder's started channel: closed once, by its
// fn when it holds the lock and has read (the second holder starts then,
// and waits for the lock), or when its call returns without running fn.
type startSignal struct {
	once sync.Once
	ch   chan struct{}
}

func newStart() *startSignal { return &startSignal{ch: make(chan struct{})} }

func (s *startSignal) close() { s.once.Do(func() { close(s.ch) }) }

// assertSequence checks that owner's items hold 1..want, each once.
func assertSequence(t *testing.T, k testdb.Kind, owner string, want int) {
	t.Helper()
	q := "SELECT COUNT(*), COUNT(DISTINCT n), COALESCE(MAX(n), 0) FROM items WHERE owner = ?"
	if k.Dialect() == "postgres" {
		q = strings.Replace(q, "?", "$1", 1)
	}
	var total, distinct, top int
	if err := testdb.AdminDB(t, k).QueryRow(q, owner).Scan(&total, &distinct, &top); err != nil {
		t.Fatal(err)
	}
	if total != want || distinct != total || top != total {
		t.Fatalf("rows %d, distinct %d, max %d; want 1..%d each once (a holder read a stale snapshot)", total, distinct, top, want)
	}
}

// forEachIsolation runs f for every adapter, server and isolation above
// READ COMMITTED.
func forEachIsolation(t *testing.T, f func(t *testing.T, a adapter, k testdb.Kind, txo ormlock.Option)) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		for _, iso := range isolations {
			t.Run(iso.name, func(t *testing.T) {
				f(t, a, k, ormlock.WithTxOptions(&sql.TxOptions{Isolation: iso.level}))
			})
		}
	})
}

// A waiter above READ COMMITTED reads what the holder committed: its
// snapshot is taken after the lock.
func TestTransactionIsolationWait(t *testing.T) {
	forEachIsolation(t, func(t *testing.T, a adapter, k testdb.Kind, txo ormlock.Option) {
		ctx := context.Background()
		ra, rb := a.open(t, k), a.open(t, k)
		owner := enttest.Owner(t, k)
		key := "iso-wait-" + t.Name()
		var wg sync.WaitGroup
		var errA, errB error
		started := newStart()
		wg.Go(func() {
			errA = ra.Transaction(ctx, key, func(tx txn) error { return nextHeld(tx, owner, started, 400*time.Millisecond) }, txo)
			started.close()
		})
		<-started.ch
		wg.Go(func() {
			errB = rb.Transaction(ctx, key, func(tx txn) error { return next(tx, owner) }, txo, ormlock.WithWait(5*time.Second))
		})
		wg.Wait()
		if errA != nil || errB != nil {
			t.Fatalf("A: %v, B: %v; want both nil", errA, errB)
		}
		assertSequence(t, k, owner, 2)
	})
}

// Try-once callers above READ COMMITTED on three pools: every winner reads
// the previous winner's row.
func TestTransactionIsolationTryOnce(t *testing.T) {
	forEachIsolation(t, func(t *testing.T, a adapter, k testdb.Kind, txo ormlock.Option) {
		ctx := context.Background()
		const pools, rounds = 3, 40
		var ls []locker
		for range pools {
			ls = append(ls, a.open(t, k))
		}
		owner := enttest.Owner(t, k)
		key := "iso-try-" + t.Name()
		var mu sync.Mutex
		won := 0
		var wg sync.WaitGroup
		for _, l := range ls {
			wg.Go(func() {
				for range rounds {
					err := l.Transaction(ctx, key, func(tx txn) error { return next(tx, owner) }, txo)
					switch {
					case err == nil:
						mu.Lock()
						won++
						mu.Unlock()
					case errors.Is(err, ormlock.ErrNotAcquired):
					default:
						t.Errorf("Transaction: %v", err)
						return
					}
				}
			})
		}
		wg.Wait()
		if won == 0 {
			t.Fatal("no call took the lock")
		}
		assertSequence(t, k, owner, won)
	})
}

// RunOnce above READ COMMITTED: the waiter finds the slot done and does not
// run fn.
func TestRunOnceIsolationWait(t *testing.T) {
	forEachIsolation(t, func(t *testing.T, a adapter, k testdb.Kind, txo ormlock.Option) {
		ctx := context.Background()
		ra, rb := openRunner(t, a, k), openRunner(t, a, k)
		ledger := ormlock.WithLedgerTable(ledgerTable(t, k, ra))
		owner := enttest.Owner(t, k)
		job := "iso-runonce-" + t.Name()
		slot := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
		var wg sync.WaitGroup
		var errA, errB error
		ranB := false
		started := newStart()
		wg.Go(func() {
			errA = ra.RunOnce(ctx, job, slot, func(tx txn) error { return nextHeld(tx, owner, started, 400*time.Millisecond) }, txo, ledger)
			started.close()
		})
		<-started.ch
		wg.Go(func() {
			errB = rb.RunOnce(ctx, job, slot, func(tx txn) error { ranB = true; return next(tx, owner) }, txo, ledger, ormlock.WithWait(5*time.Second))
		})
		wg.Wait()
		if errA != nil || !errors.Is(errB, ormlock.ErrAlreadyDone) || ranB {
			t.Fatalf("A: %v; B: %v (fn ran: %v); want nil and ErrAlreadyDone without running", errA, errB, ranB)
		}
		assertSequence(t, k, owner, 1)
	})
}

// Above READ COMMITTED the lock lives on its own connection: when that
// connection dies while fn runs, fn's transaction is rolled back before
// COMMIT and the error wraps ErrLockLost.
func TestSnapshotIsolationLockLostBeforeCommit(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, a adapter, k testdb.Kind) {
		ctx := context.Background()
		r := openRunner(t, a, k)
		owner := enttest.Owner(t, k)
		key := "lost-" + t.Name()
		err := r.Transaction(ctx, key, func(tx txn) error {
			if err := tx.Insert(owner, 1); err != nil {
				return err
			}
			h, err := r.Holder(ctx, key)
			if err != nil || !h.Held {
				return errors.Join(errors.New("holder not found"), err)
			}
			var ok bool
			return testdb.AdminDB(t, k).QueryRow("SELECT pg_terminate_backend($1)", h.PID).Scan(&ok)
		}, ormlock.WithTxOptions(&sql.TxOptions{Isolation: sql.LevelRepeatableRead}))
		if !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("Transaction: %v, want ErrLockLost", err)
		}
		assertSequence(t, k, owner, 0)
	})
}

// The split protocol needs two connections: refused with MaxOpenConns 1.
func TestSnapshotIsolationNeedsTwoConns(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		r.Pool().SetMaxOpenConns(1)
		for _, iso := range isolations {
			ran := false
			err := r.Transaction(context.Background(), "two-conns-"+t.Name(), func(txn) error { ran = true; return nil },
				ormlock.WithTxOptions(&sql.TxOptions{Isolation: iso.level}))
			if !errors.Is(err, ormlock.ErrInvalidArgument) || ran || !strings.Contains(err.Error(), "MaxOpenConns") {
				t.Fatalf("%s: Transaction: %v (ran %v), want ErrInvalidArgument naming MaxOpenConns", iso.name, err, ran)
			}
		}
	})
}

// A server (or role, or connection) whose default_transaction_isolation is
// REPEATABLE READ, with no level asked for: the lock statement, the
// transaction's first, would take the snapshot before the lock. The
// one-message path reads the level with the lock and, seeing a
// snapshot-once level, takes the two-connection path at that level instead,
// so B still sees A's commit. A driver other than pgx (lib/pq), on which
// BEGIN and the lock are two messages, reads the level with the lock
// statement the same way. Directly on PostgreSQL only: PgBouncer refuses
// the start-up parameter that sets the default here.
func TestTransactionServerDefaultIsolation(t *testing.T) {
	k := testdb.Postgres
	dsn := testdb.DSN(t, k)
	for _, a := range adapters {
		for _, c := range []struct{ driver, level string }{
			{"pgx", "repeatable%20read"}, {"pgx", "serializable"},
			{"postgres", "repeatable%20read"}, {"postgres", "serializable"},
		} {
			driver, level := c.driver, c.level
			t.Run(a.name+"/"+driver+"/"+level, func(t *testing.T) {
				open := func() runner {
					db, err := sql.Open(driver, testdb.WithParams(dsn, "default_transaction_isolation="+level))
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db); _ = db.Close() })
					return a.on(t, k.Dialect(), db)
				}
				ctx := context.Background()
				ra, rb := open(), open()
				var got string
				if err := rb.Pool().QueryRow("SELECT current_setting('transaction_isolation')").Scan(&got); err != nil || got == "read committed" {
					t.Fatalf("the pool's default isolation is %q (%v); the test needs it above READ COMMITTED", got, err)
				}
				owner := enttest.Owner(t, k)
				key := "iso-default-" + t.Name()
				var wg sync.WaitGroup
				var errA, errB error
				started := newStart()
				wg.Go(func() {
					errA = ra.Transaction(ctx, key, func(tx txn) error { return nextHeld(tx, owner, started, 400*time.Millisecond) })
					started.close()
				})
				<-started.ch
				wg.Go(func() {
					errB = rb.Transaction(ctx, key, func(tx txn) error {
						var iso string
						if err := tx.Scan("SELECT current_setting('transaction_isolation')", &iso); err != nil {
							return err
						}
						if iso == "read committed" {
							t.Errorf("fn ran at %q, want the server's default level", iso)
						}
						return next(tx, owner)
					}, ormlock.WithWait(5*time.Second))
				})
				wg.Wait()
				if errA != nil || errB != nil {
					t.Fatalf("A: %v, B: %v; want both nil", errA, errB)
				}
				assertSequence(t, k, owner, 2)
			})
		}
	}
}
