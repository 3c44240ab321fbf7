package entlock_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	entsql "entgo.io/ent/dialect/sql"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/enttest"
	"github.com/ormlock/ormlock/internal/enttest/ent"
	"github.com/ormlock/ormlock/internal/enttest/ent/item"
	"github.com/ormlock/ormlock/internal/testdb"
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
func next(ctx context.Context, tx *ent.Tx, owner string, hold time.Duration) error {
	items, err := tx.Item.Query().Where(item.Owner(owner)).All(ctx)
	if err != nil {
		return err
	}
	top := 0
	for _, it := range items {
		top = max(top, it.N)
	}
	time.Sleep(hold)
	return insert(ctx, tx, owner, top+1)
}

// assertSequence checks that owner's items hold 1..want, each once.
func assertSequence(t *testing.T, k testdb.Kind, owner string, want int) {
	t.Helper()
	client := ent.NewClient(ent.Driver(entsql.OpenDB(k.Dialect(), testdb.AdminDB(t, k))))
	items, err := client.Item.Query().Where(item.Owner(owner)).All(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, it := range items {
		if seen[it.N] || it.N < 1 || it.N > want {
			t.Fatalf("n = %d twice or out of 1..%d (%d rows): a holder read a stale snapshot", it.N, want, len(items))
		}
		seen[it.N] = true
	}
	if len(items) != want {
		t.Fatalf("%d rows, want %d", len(items), want)
	}
}

func TestTransactionIsolationWait(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		for _, iso := range isolations {
			t.Run(iso.name, func(t *testing.T) {
				ctx := context.Background()
				a, _ := openEnt(t, k)
				b, _ := openEnt(t, k)
				owner := enttest.Owner(t, k)
				key := "iso-wait-" + t.Name()
				txo := ormlock.WithTxOptions(&sql.TxOptions{Isolation: iso.level})
				var wg sync.WaitGroup
				var errA, errB error
				wg.Go(func() {
					errA = entlock.Transaction(ctx, a, key, func(tx *ent.Tx) error { return next(ctx, tx, owner, 400*time.Millisecond) }, txo)
				})
				time.Sleep(100 * time.Millisecond)
				wg.Go(func() {
					errB = entlock.Transaction(ctx, b, key, func(tx *ent.Tx) error { return next(ctx, tx, owner, 0) }, txo, ormlock.WithWait(5*time.Second))
				})
				wg.Wait()
				if errA != nil || errB != nil {
					t.Fatalf("A: %v, B: %v; want both nil", errA, errB)
				}
				assertSequence(t, k, owner, 2)
			})
		}
	})
}

func TestTransactionIsolationTryOnce(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		for _, iso := range isolations {
			t.Run(iso.name, func(t *testing.T) {
				ctx := context.Background()
				const pools, rounds = 3, 40
				var clients []*ent.Client
				for range pools {
					c, _ := openEnt(t, k)
					clients = append(clients, c)
				}
				owner := enttest.Owner(t, k)
				key := "iso-try-" + t.Name()
				txo := ormlock.WithTxOptions(&sql.TxOptions{Isolation: iso.level})
				var mu sync.Mutex
				won := 0
				var wg sync.WaitGroup
				for _, c := range clients {
					wg.Go(func() {
						for range rounds {
							err := entlock.Transaction(ctx, c, key, func(tx *ent.Tx) error { return next(ctx, tx, owner, 0) }, txo)
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
	})
}

func TestRunOnceIsolationWait(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		for _, iso := range isolations {
			t.Run(iso.name, func(t *testing.T) {
				ctx := context.Background()
				a, _ := openEnt(t, k)
				b, _ := openEnt(t, k)
				ledger := ormlock.WithLedgerTable(ledgerTable(t, k, a))
				owner := enttest.Owner(t, k)
				job := "iso-runonce-" + t.Name()
				slot := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
				txo := ormlock.WithTxOptions(&sql.TxOptions{Isolation: iso.level})
				var wg sync.WaitGroup
				var errA, errB error
				ranB := false
				wg.Go(func() {
					errA = entlock.RunOnce(ctx, a, job, slot, func(tx *ent.Tx) error { return next(ctx, tx, owner, 400*time.Millisecond) }, txo, ledger)
				})
				time.Sleep(100 * time.Millisecond)
				wg.Go(func() {
					errB = entlock.RunOnce(ctx, b, job, slot, func(tx *ent.Tx) error { ranB = true; return next(ctx, tx, owner, 0) }, txo, ledger, ormlock.WithWait(5*time.Second))
				})
				wg.Wait()
				if errA != nil || !errors.Is(errB, ormlock.ErrAlreadyDone) || ranB {
					t.Fatalf("A: %v; B: %v (fn ran: %v); want nil and ErrAlreadyDone without running", errA, errB, ranB)
				}
				assertSequence(t, k, owner, 1)
			})
		}
	})
}

// The split protocol needs two connections: refused with MaxOpenConns 1.
func TestSnapshotIsolationNeedsTwoConns(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			c, db := openEnt(t, k)
			db.SetMaxOpenConns(1)
			ran := false
			err := entlock.Transaction(context.Background(), c, "two-conns-"+t.Name(), func(*ent.Tx) error { ran = true; return nil },
				ormlock.WithTxOptions(&sql.TxOptions{Isolation: sql.LevelSerializable}))
			if !errors.Is(err, ormlock.ErrInvalidArgument) || ran || !strings.Contains(err.Error(), "MaxOpenConns") {
				t.Fatalf("Transaction: %v (ran %v), want ErrInvalidArgument naming MaxOpenConns", err, ran)
			}
		})
	}
}
