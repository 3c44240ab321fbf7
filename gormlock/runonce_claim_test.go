package gormlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	_ "time/tzdata" // zone data for the DST tests, whatever the machine has

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
)

func TestRunOnceClaim(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db1, _ := openGorm(t, k)
		db2, _ := openGorm(t, k)
		tbl := ledgerTable(t, k, db1)
		work := table(t, k, db1)
		job := "claim-" + t.Name()
		slot := slotAt(3)
		opts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithClaim()}

		inFn, proceed := make(chan struct{}), make(chan struct{})
		result := make(chan error, 1)
		go func() {
			result <- gormlock.RunOnce(db1, job, slot, func(db *gorm.DB) error {
				if err := db.Exec("INSERT INTO " + work + " (id) VALUES (1)").Error; err != nil {
					return err
				}
				close(inFn)
				<-proceed
				return nil
			}, append(opts, ormlock.WithOwner("one"))...)
		}()
		select {
		case <-inFn:
		case err := <-result:
			t.Fatalf("claim run ended early: %v", err)
		}
		// while fn runs: the running row and fn's own writes are visible
		// from another pool (nothing waits for a commit)
		rs := runs(t, db2, tbl, job)
		if len(rs) != 1 || rs[0].Status != ormlock.RunRunning || rs[0].Owner != "one" || !rs[0].Finished.IsZero() || rs[0].Started.IsZero() {
			close(proceed)
			t.Fatalf("ledger during the run: %+v, want one running row owned by one", rs)
		}
		if n := count(t, db2, work); n != 1 {
			close(proceed)
			t.Fatalf("fn's write not visible during the run (%d rows): fn ran in a transaction", n)
		}
		// a second instance, in either mode, is turned away
		for _, mode := range []ormlock.Option{ormlock.WithClaim(), nil} {
			err := gormlock.RunOnce(db2, job, slot, func(*gorm.DB) error { return errors.New("must not run") },
				ormlock.WithLedgerTable(tbl), ormlock.WithOwner("two"), mode)
			if !errors.Is(err, ormlock.ErrNotAcquired) {
				close(proceed)
				t.Fatalf("second instance during the run: %v, want ErrNotAcquired", err)
			}
		}
		close(proceed)
		if err := <-result; err != nil {
			t.Fatalf("claim run: %v", err)
		}
		rs = runs(t, db2, tbl, job)
		if len(rs) != 1 || rs[0].Status != ormlock.RunDone || rs[0].Owner != "one" || rs[0].Finished.Before(rs[0].Started) || rs[0].Duration < 0 {
			t.Fatalf("ledger after the run: %+v, want done", rs)
		}
		for _, mode := range []ormlock.Option{ormlock.WithClaim(), nil} {
			err := gormlock.RunOnce(db2, job, slot, func(*gorm.DB) error { return errors.New("must not run") }, ormlock.WithLedgerTable(tbl), mode)
			if !errors.Is(err, ormlock.ErrAlreadyDone) {
				t.Fatalf("after the run: %v, want ErrAlreadyDone", err)
			}
		}
		t.Logf("run took %v by the server's clock", rs[0].Duration)
	})
}

func TestRunOnceClaimFailureAndTakeover(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := openGorm(t, k)
		tbl := ledgerTable(t, k, db)
		job := "takeover-" + t.Name()
		opts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithClaim()}

		// a failed run records its error, truncated and cleaned
		long := "bad \xff byte and a NUL \x00: " + strings.Repeat("é", 3000)
		boom := errors.New(long)
		err := gormlock.RunOnce(db, job, slotAt(0), func(*gorm.DB) error { return boom }, append(opts, ormlock.WithOwner("one"))...)
		if err != boom {
			t.Fatalf("err = %v, want fn's error unchanged", err)
		}
		rs := runs(t, db, tbl, job)
		if len(rs) != 1 || rs[0].Status != ormlock.RunFailed || rs[0].Owner != "one" || rs[0].Finished.IsZero() {
			t.Fatalf("ledger after failure: %+v", rs)
		}
		if e := rs[0].Error; len(e) > 4000 || !strings.HasSuffix(e, "…[truncated]") || !strings.HasPrefix(e, "bad \uFFFD byte and a NUL : éé") {
			t.Fatalf("error text (%d bytes) %.60q...%q not cleaned and truncated", len(e), e, e[max(0, len(e)-20):])
		}
		// a retry by another instance takes the failed row over
		if err := gormlock.RunOnce(db, job, slotAt(0), func(*gorm.DB) error { return nil }, append(opts, ormlock.WithOwner("two"))...); err != nil {
			t.Fatalf("retry: %v", err)
		}
		rs = runs(t, db, tbl, job)
		if len(rs) != 1 || rs[0].Status != ormlock.RunDone || rs[0].Owner != "two" || rs[0].Error != "" {
			t.Fatalf("ledger after retry: %+v, want done by two, error cleared", rs)
		}

		// a row left running by an owner that died is taken over, in either
		// mode, since the taker holds the lock
		for i, mode := range []ormlock.Option{ormlock.WithClaim(), nil} {
			slot := slotAt(10 + i)
			q := "INSERT INTO " + tbl + " (job, slot, status, owner, started_at) VALUES ($1, $2, 'running', 'dead/1', '2001-01-01 00:00:00')"
			args := []any{job, slot}
			if k.Dialect() == "mysql" {
				q = strings.NewReplacer("$1", "?", "$2", "?").Replace(q)
				args = []any{job, slot.Format("2006-01-02 15:04:05")}
			}
			if _, err := testdb.AdminDB(t, k).Exec(q, args...); err != nil {
				t.Fatal(err)
			}
			if err := gormlock.RunOnce(db, job, slot, func(*gorm.DB) error { return nil }, ormlock.WithLedgerTable(tbl), ormlock.WithOwner("three"), mode); err != nil {
				t.Fatalf("take over a dead owner's row: %v", err)
			}
		}
		for _, r := range runs(t, db, tbl, job)[:2] {
			if r.Status != ormlock.RunDone || r.Owner != "three" || r.Started.Year() < 2020 {
				t.Fatalf("dead owner's row not taken over: %+v", r)
			}
		}
	})
}

// killLockHolder ends, from the admin pool, the server session that holds
// the lock named name.
func killLockHolder(t *testing.T, k testdb.Kind, name string) {
	t.Helper()
	admin := testdb.AdminDB(t, k)
	if k.Dialect() == "postgres" {
		key := uint64(keyhash.Int64(name))
		var pid int64
		err := admin.QueryRow(`SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
			AND classid::int8 = $1 AND objid::int8 = $2 AND objsubid = 1`, int64(key>>32), int64(key&0xffffffff)).Scan(&pid)
		if err != nil {
			t.Fatalf("find the lock holder: %v", err)
		}
		if _, err := admin.Exec("SELECT pg_terminate_backend($1)", pid); err != nil {
			t.Fatal(err)
		}
		return
	}
	var id sql.NullInt64
	if err := admin.QueryRow("SELECT IS_USED_LOCK(?)", keyhash.MySQLName("", name)).Scan(&id); err != nil || !id.Valid {
		t.Fatalf("find the lock holder: %v (id %v)", err, id)
	}
	if _, err := admin.Exec(fmt.Sprintf("KILL CONNECTION %d", id.Int64)); err != nil {
		t.Fatal(err)
	}
}

func TestRunOnceClaimLockLost(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := openGorm(t, k)
		tbl := ledgerTable(t, k, db)
		job := "lost-" + t.Name()
		slot := slotAt(5)
		opts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithClaim(), ormlock.WithKeepalive(100 * time.Millisecond)}
		inFn := make(chan struct{})
		result := make(chan error, 1)
		var sawCause atomic.Value
		go func() {
			result <- gormlock.RunOnce(db, job, slot, func(db *gorm.DB) error {
				close(inFn)
				ctx := db.Statement.Context
				select {
				case <-ctx.Done():
					sawCause.Store(context.Cause(ctx))
					return ctx.Err()
				case <-time.After(30 * time.Second):
					return errors.New("lock loss never reported")
				}
			}, opts...)
		}()
		<-inFn
		start := time.Now()
		killLockHolder(t, k, keys.NameValue(keys.RunKey(job, slot)))
		err := <-result
		t.Logf("loss reported after %v: %v", time.Since(start).Round(time.Millisecond), err)
		if !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("err = %v, want ErrLockLost", err)
		}
		if c, _ := sawCause.Load().(error); !errors.Is(c, ormlock.ErrLockLost) {
			t.Fatalf("fn's context cause = %v, want ErrLockLost", c)
		}
		rs := runs(t, db, tbl, job)
		if len(rs) != 1 || rs[0].Status != ormlock.RunFailed || !strings.Contains(rs[0].Error, "lock lost") {
			t.Fatalf("ledger after a lost lock: %+v, want failed with the loss", rs)
		}
		if err := gormlock.RunOnce(db, job, slot, func(*gorm.DB) error { return nil }, opts...); err != nil {
			t.Fatalf("retry after loss: %v", err)
		}
		if rs := runs(t, db, tbl, job); rs[0].Status != ormlock.RunDone {
			t.Fatalf("ledger after retry: %+v", rs)
		}
	})
}
