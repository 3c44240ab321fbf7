package gormlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	_ "time/tzdata" // zone data for the DST tests, whatever the machine has

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/testdb"
)

// ledgerTable creates the test's own ledger table with Migrate and drops it
// after the test.
func ledgerTable(t *testing.T, k testdb.Kind, db *gorm.DB) string {
	t.Helper()
	name := "r_" + keyhashHex(t.Name())
	t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + name) })
	if err := gormlock.Migrate(db, ormlock.WithLedgerTable(name)); err != nil {
		t.Fatalf("Migrate(%s): %v", name, err)
	}
	return name
}

// slotAt returns a distinct, deterministic slot per test and index.
func slotAt(i int) time.Time {
	return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Hour)
}

// runs reads the ledger of job through gormlock.Runs from db.
func runs(t *testing.T, db *gorm.DB, tbl, job string) []ormlock.Run {
	t.Helper()
	rs, err := gormlock.Runs(db, job, 1000, ormlock.WithLedgerTable(tbl))
	if err != nil {
		t.Fatalf("Runs: %v", err)
	}
	return rs
}

// maxOf raises m to n.
func maxOf(m *atomic.Int64, n int64) {
	for {
		cur := m.Load()
		if n <= cur || m.CompareAndSwap(cur, n) {
			return
		}
	}
}

// The detector of TestConformanceRunOnceExactlyOncePerSlot (internal/conformance)
// and TestConformanceMigrateConcurrent works: a plain duplicate
// INSERT does show up in the server log.
func TestRunOnceDuplicateKeyDetector(t *testing.T) {
	k := testdb.Postgres
	db, _ := openGorm(t, k)
	tbl := ledgerTable(t, k, db)
	off := testdb.LogOffset(t, k)
	if off < 0 {
		t.Skip("no server log (DSN override)")
	}
	job := "dup-" + t.Name()
	if err := gormlock.RunOnce(db, job, slotAt(0), func(*gorm.DB) error { return nil }, ormlock.WithLedgerTable(tbl)); err != nil {
		t.Fatal(err)
	}
	if err := gormlock.RunOnce(db, job, slotAt(0), func(*gorm.DB) error { return nil }, ormlock.WithLedgerTable(tbl)); !errors.Is(err, ormlock.ErrAlreadyDone) {
		t.Fatalf("second run: %v", err)
	}
	testdb.AssertNoDuplicateKeyLogged(t, k, off)
	_, err := testdb.AdminDB(t, k).Exec("INSERT INTO "+tbl+" (job, slot, status, owner, started_at) VALUES ($1, $2, 'done', 'x', now())", job, slotAt(0))
	if err == nil {
		t.Fatal("plain duplicate INSERT succeeded")
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(testdb.LogLines(t, k, off, "duplicate key")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a real duplicate-key error never reached the server log: the detector is blind")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestRunOncePanic(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := openGorm(t, k)
		tbl := ledgerTable(t, k, db)
		work := table(t, k, db)
		job := "panic-" + t.Name()
		for _, claim := range []bool{false, true} {
			opts := []ormlock.Option{ormlock.WithLedgerTable(tbl)}
			slot := slotAt(0)
			if claim {
				opts = append(opts, ormlock.WithClaim())
				slot = slotAt(1)
			}
			var got any
			func() {
				defer func() { got = recover() }()
				_ = gormlock.RunOnce(db, job, slot, func(tx *gorm.DB) error {
					tx.Exec("INSERT INTO " + work + " (id) VALUES (7)")
					panic("kaboom")
				}, opts...)
			}()
			if got != "kaboom" {
				t.Fatalf("claim=%v: recovered %v, want the original panic value", claim, got)
			}
			if !rawFree(t, k, keys.NameValue(keys.RunKey(job, slot))) {
				t.Fatalf("claim=%v: lock still held after panic", claim)
			}
		}
		rs := runs(t, db, tbl, job)
		// transactional: rolled back, no row; claim: the row says failed
		if len(rs) != 1 || !rs[0].Slot.Equal(slotAt(1)) || rs[0].Status != ormlock.RunFailed || rs[0].Error != "panic: kaboom" {
			t.Fatalf("ledger after panics: %+v, want only the claim-mode row, failed with the panic", rs)
		}
		if n := count(t, db, work); n != 1 { // the claim-mode fn wrote outside any transaction
			t.Fatalf("work rows = %d, want 1 (claim mode is not transactional)", n)
		}
		for _, s := range []time.Time{slotAt(0), slotAt(1)} {
			if err := gormlock.RunOnce(db, job, s, func(*gorm.DB) error { return nil }, ormlock.WithLedgerTable(tbl)); err != nil {
				t.Fatalf("retry after panic: %v", err)
			}
		}
	})
}

func TestRunOnceContext(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := openGorm(t, k)
		tbl := ledgerTable(t, k, db)
		job := "ctx-" + t.Name()
		opt := ormlock.WithLedgerTable(tbl)

		// an already cancelled context: fn is not called, nothing is
		// written, and the error matches both ErrNotAcquired and the
		// context's error.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		called := false
		for _, claim := range []ormlock.Option{nil, ormlock.WithClaim()} {
			err := gormlock.RunOnce(db.WithContext(ctx), job, slotAt(0), func(*gorm.DB) error { called = true; return nil }, opt, claim)
			if !errors.Is(err, context.Canceled) || !errors.Is(err, ormlock.ErrNotAcquired) || called {
				t.Fatalf("claim=%v: cancelled context: err=%v called=%v, want ErrNotAcquired and context.Canceled", claim != nil, err, called)
			}
		}

		// cancelled while fn runs: the transaction cannot commit, no row
		ctx, cancel = context.WithCancel(context.Background())
		err := gormlock.RunOnce(db.WithContext(ctx), job, slotAt(0), func(tx *gorm.DB) error {
			cancel()
			return tx.Exec("SELECT 1").Error
		}, opt)
		if err == nil {
			t.Fatal("fn's statement after cancel succeeded")
		}
		if rs := runs(t, db, tbl, job); len(rs) != 0 {
			t.Fatalf("ledger after a cancelled run: %+v", rs)
		}
		if err := gormlock.RunOnce(db, job, slotAt(0), func(*gorm.DB) error { return nil }, opt); err != nil {
			t.Fatalf("later run: %v", err)
		}
	})
}

func TestRunOnceBadInput(t *testing.T) {
	db, _ := openGorm(t, testdb.Postgres)
	called := false
	fn := func(*gorm.DB) error { called = true; return nil }
	slot := slotAt(0)
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"nil db", gormlock.RunOnce(nil, "j", slot, fn), "nil *gorm.DB"},
		{"nil fn", gormlock.RunOnce(db, "j", slot, nil), "nil fn"},
		{"empty job", gormlock.RunOnce(db, "", slot, fn), "empty job name"},
		{"long job", gormlock.RunOnce(db, strings.Repeat("j", 192), slot, fn), "at most 191"},
		{"bad UTF-8 job", gormlock.RunOnce(db, "j\xff", slot, fn), "not valid UTF-8"},
		{"NUL job", gormlock.RunOnce(db, "j\x00", slot, fn), "NUL"},
		{"zero slot", gormlock.RunOnce(db, "j", time.Time{}, fn), "zero slot"},
		{"ancient slot", gormlock.RunOnce(db, "j", time.Date(999, 1, 1, 0, 0, 0, 0, time.UTC), fn), "outside years"},
		{"bad owner", gormlock.RunOnce(db, "j", slot, fn, ormlock.WithOwner(strings.Repeat("o", 256))), "WithOwner"},
		{"bad wait", gormlock.RunOnce(db, "j", slot, fn, ormlock.WithWait(-1)), "WithWait"},
		{"nil db Migrate", gormlock.Migrate(nil), "nil *gorm.DB"},
	}
	for _, c := range cases {
		if !errors.Is(c.err, ormlock.ErrInvalidArgument) || !strings.Contains(c.err.Error(), c.want) || !strings.HasPrefix(c.err.Error(), "ormlock: ") {
			t.Errorf("%s: %v, want ErrInvalidArgument mentioning %q", c.name, c.err, c.want)
		}
	}
	if called {
		t.Error("fn called on bad input")
	}
}

func TestRunOnceNested(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := openGorm(t, k)
		tbl := ledgerTable(t, k, db)
		job := "nested-" + t.Name()
		opt := ormlock.WithLedgerTable(tbl)
		errOuter := errors.New("outer rolls back")
		err := db.Transaction(func(tx *gorm.DB) error {
			if err := gormlock.RunOnce(tx, job, slotAt(0), func(*gorm.DB) error { return nil }, opt, ormlock.WithClaim()); !errors.Is(err, ormlock.ErrInvalidArgument) {
				return fmt.Errorf("claim mode inside a transaction: %v, want ErrInvalidArgument", err)
			}
			err := gormlock.RunOnce(tx, job, slotAt(0), func(*gorm.DB) error { return nil }, opt)
			if k.Dialect() == "mysql" {
				if !errors.Is(err, gormlock.ErrNestedTransaction) {
					return fmt.Errorf("nested on mysql: %v, want ErrNestedTransaction", err)
				}
				return errOuter
			}
			if err != nil {
				return fmt.Errorf("nested on postgres: %v", err)
			}
			// the lock stays with the outer transaction until it ends
			if rawFree(t, k, keys.NameValue(keys.RunKey(job, slotAt(0)))) {
				return errors.New("lock released before the outer transaction ended")
			}
			return errOuter
		})
		if err != errOuter {
			t.Fatal(err)
		}
		// the outer rollback took the ledger row with it
		if rs := runs(t, db, tbl, job); len(rs) != 0 {
			t.Fatalf("ledger after the outer rollback: %+v", rs)
		}
	})
}

func TestRunOnceObserverAndNamespace(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := openGorm(t, k)
		tbl := ledgerTable(t, k, db)
		job := "observed-" + t.Name()
		var mu sync.Mutex
		var events []ormlock.Event
		obs := ormlock.ObserverFunc(func(_ context.Context, e ormlock.Event) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, e)
		})
		if err := db.Use(gormlock.New(ormlock.WithNamespace("billing"), ormlock.WithObserver(obs), ormlock.WithLedgerTable(tbl))); err != nil {
			t.Fatal(err)
		}
		name := keys.NameValue(keys.RunKey(job, slotAt(0)))
		err := gormlock.RunOnce(db, job, slotAt(0), func(*gorm.DB) error {
			if !rawFree(t, k, name) || rawFreeNS(t, k, "billing", name) {
				return errors.New("the run lock is not the namespaced RunKey")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := gormlock.RunOnce(db, job, slotAt(0), func(*gorm.DB) error { return nil }); !errors.Is(err, ormlock.ErrAlreadyDone) {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		var kinds []string
		for _, e := range events {
			if e.Verb != "RunOnce" || e.Namespace != "billing" || keys.NameValue(e.Key) != name {
				t.Errorf("event %+v", e)
			}
			kinds = append(kinds, e.Kind.String())
		}
		got := strings.Join(kinds, ",")
		if want := "attempt,acquired,released,attempt,acquired,already_done,released"; got != want {
			t.Errorf("events %s, want %s", got, want)
		}
	})
}

// With the MySQL driver's clientFoundRows=true, ON DUPLICATE KEY UPDATE
// reports 1 for a row left as it was; the claim reads the row back, so a
// done slot is still seen as done.
func TestRunOnceMySQLClientFoundRows(t *testing.T) {
	k := testdb.MariaDB
	dsn := testdb.DSN(t, k)
	dsn = strings.Replace(dsn, "parseTime=true&loc=UTC", "clientFoundRows=true&interpolateParams=true", 1)
	if !strings.Contains(dsn, "clientFoundRows=true") {
		t.Fatalf("unexpected DSN shape %q", dsn)
	}
	sqlDB, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqlDB.Close() })
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, sqlDB) })
	db := gormOn(t, k, sqlDB)
	tbl := ledgerTable(t, k, db)
	job := "foundrows-" + t.Name()
	for i, mode := range []ormlock.Option{nil, ormlock.WithClaim()} {
		calls := 0
		for range 3 {
			err := gormlock.RunOnce(db, job, slotAt(i), func(*gorm.DB) error { calls++; return nil }, ormlock.WithLedgerTable(tbl), mode)
			if err != nil && !errors.Is(err, ormlock.ErrAlreadyDone) {
				t.Fatal(err)
			}
		}
		if calls != 1 {
			t.Fatalf("mode %d: fn ran %d times with clientFoundRows=true, want 1", i, calls)
		}
	}
	if rs := runs(t, db, tbl, job); len(rs) != 2 || rs[0].Status != ormlock.RunDone || rs[1].Status != ormlock.RunDone {
		t.Fatalf("ledger: %+v", rs)
	}
}

// With PrepareStmt the ledger statements bypass GORM's statement cache, as
// the lock statements do.
func TestRunOncePrepareStmt(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
		t.Run(string(k), func(t *testing.T) {
			db, _ := openGorm(t, k, &gorm.Config{PrepareStmt: true})
			tbl := ledgerTable(t, k, db)
			work := table(t, k, db)
			job := "prep-" + t.Name()
			for i, mode := range []ormlock.Option{nil, ormlock.WithClaim(), nil} {
				err := gormlock.RunOnce(db, job, slotAt(i%2), func(tx *gorm.DB) error {
					return tx.Exec("INSERT INTO "+work+" (id) VALUES (?)", i).Error
				}, ormlock.WithLedgerTable(tbl), mode)
				if i == 2 {
					if !errors.Is(err, ormlock.ErrAlreadyDone) {
						t.Fatalf("third run: %v", err)
					}
				} else if err != nil {
					t.Fatal(err)
				}
			}
			if n := count(t, db, work); n != 2 {
				t.Fatalf("work rows = %d, want 2", n)
			}
		})
	}
}

// PostgreSQL REPEATABLE READ: a waiter's snapshot is taken after the lock is
// granted, so it sees the winner's commit and the slot done (it was a
// serialization failure when the snapshot predated the wait).
func TestRunOnceRepeatableReadWaiter(t *testing.T) {
	k := testdb.Postgres
	db1, _ := openGorm(t, k)
	db2, _ := openGorm(t, k)
	tbl := ledgerTable(t, k, db1)
	job := "rr-" + t.Name()
	in := make(chan struct{})
	res := make(chan error, 1)
	go func() {
		res <- gormlock.RunOnce(db1, job, slotAt(0), func(*gorm.DB) error {
			close(in)
			time.Sleep(300 * time.Millisecond)
			return nil
		}, ormlock.WithLedgerTable(tbl))
	}()
	<-in
	rr := ormlock.WithTxOptions(&sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	called := false
	fn := func(*gorm.DB) error { called = true; return nil }
	err := gormlock.RunOnce(db2, job, slotAt(0), fn, ormlock.WithLedgerTable(tbl), ormlock.WithWait(20*time.Second), rr)
	if werr := <-res; werr != nil {
		t.Fatalf("winner: %v", werr)
	}
	if !errors.Is(err, ormlock.ErrAlreadyDone) || called {
		t.Fatalf("waiter: err=%v called=%v, want ErrAlreadyDone", err, called)
	}
	if err := gormlock.RunOnce(db2, job, slotAt(0), fn, ormlock.WithLedgerTable(tbl), rr); !errors.Is(err, ormlock.ErrAlreadyDone) || called {
		t.Fatalf("call again: %v", err)
	}
}
