package gormlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	_ "time/tzdata" // zone data for the DST tests, whatever the machine has

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
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

// logOffset returns the current size of the PostgreSQL log of kind k (or -1
// when there is no log to read).
func logOffset(t *testing.T, k testdb.Kind) int64 {
	t.Helper()
	if k.Dialect() != "postgres" {
		return -1
	}
	p := testdb.LogPath(t, k)
	if p == "" {
		return -1
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatalf("stat server log: %v", err)
	}
	return st.Size()
}

// logLines returns the lines of the PostgreSQL log of kind k written since
// off that contain needle.
func logLines(t *testing.T, k testdb.Kind, off int64, needle string) []string {
	t.Helper()
	f, err := os.Open(testdb.LogPath(t, k))
	if err != nil {
		t.Fatalf("open server log: %v", err)
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.Contains(line, needle) {
			out = append(out, line)
		}
	}
	return out
}

func assertNoDuplicateKeyLogged(t *testing.T, k testdb.Kind, off int64) {
	t.Helper()
	if off < 0 {
		return
	}
	if lines := logLines(t, k, off, "duplicate key"); len(lines) > 0 {
		t.Fatalf("server log has %d duplicate-key error(s), e.g.\n%s", len(lines), lines[0])
	}
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

// contend runs RunOnce on every db for each of slots slots, the instances of
// a slot released together by a barrier, and checks that exactly one run per
// slot committed.
func contend(t *testing.T, k testdb.Kind, slots int, extra ...ormlock.Option) {
	const instances = 3
	dbs := make([]*gorm.DB, instances)
	for i := range dbs {
		dbs[i], _ = openGorm(t, k)
	}
	tbl := ledgerTable(t, k, dbs[0])
	work := table(t, k, dbs[0])
	job := "once-" + t.Name()
	off := logOffset(t, k)
	claim := config.New(extra...).Claim

	insideBySlot := make([]atomic.Int64, slots)
	calls := make([]atomic.Int64, slots)
	var maxInside, notAcquired, alreadyDone atomic.Int64
	start := time.Now()
	for s := range slots {
		slot := slotAt(s)
		barrier := make(chan struct{})
		errs := make([]error, instances)
		var wg sync.WaitGroup
		for i, db := range dbs {
			opts := append([]ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithOwner(fmt.Sprintf("instance-%d", i))}, extra...)
			if s%2 == 1 {
				// half the slots wait for the lock: the losers then find the
				// slot done
				opts = append(opts, ormlock.WithWait(20*time.Second))
			}
			wg.Go(func() {
				<-barrier
				errs[i] = gormlock.RunOnce(db, job, slot, func(tx *gorm.DB) error {
					maxOf(&maxInside, insideBySlot[s].Add(1))
					defer insideBySlot[s].Add(-1)
					calls[s].Add(1)
					time.Sleep(2 * time.Millisecond)
					return tx.Exec("INSERT INTO "+work+" (id, note) VALUES (?, ?)", s, fmt.Sprint("instance-", i)).Error
				}, opts...)
			})
		}
		close(barrier)
		wg.Wait()
		wins := 0
		for i, err := range errs {
			switch {
			case err == nil:
				wins++
			case errors.Is(err, ormlock.ErrNotAcquired):
				notAcquired.Add(1)
			case errors.Is(err, ormlock.ErrAlreadyDone):
				alreadyDone.Add(1)
			default:
				t.Fatalf("slot %d, instance %d: unexpected error: %v", s, i, err)
			}
		}
		if wins != 1 {
			t.Fatalf("slot %d: %d instances ran it, want exactly 1 (errors %v)", s, wins, errs)
		}
	}
	elapsed := time.Since(start)

	if got := maxInside.Load(); got != 1 {
		t.Fatalf("max fn calls inside one slot at once = %d, want 1", got)
	}
	for s := range slots {
		if n := calls[s].Load(); n != 1 {
			t.Fatalf("slot %d: fn called %d times, want 1", s, n)
		}
	}
	if n := count(t, dbs[1], work); n != int64(slots) {
		t.Fatalf("committed work rows = %d, want %d", n, slots)
	}
	rs := runs(t, dbs[2], tbl, job)
	if len(rs) != slots {
		t.Fatalf("ledger rows = %d, want %d", len(rs), slots)
	}
	for _, r := range rs {
		if r.Status != ormlock.RunDone || r.Finished.IsZero() || r.Error != "" || !strings.HasPrefix(r.Owner, "instance-") {
			t.Fatalf("ledger row %+v, want done by an instance", r)
		}
	}
	if alreadyDone.Load() == 0 {
		t.Errorf("no ErrAlreadyDone seen: the waiting losers did not exercise the ledger")
	}
	assertNoDuplicateKeyLogged(t, k, off)
	t.Logf("claim=%v: %d slots x %d instances in %v: %d ErrNotAcquired, %d ErrAlreadyDone",
		claim, slots, instances, elapsed.Round(time.Millisecond), notAcquired.Load(), alreadyDone.Load())
}

func TestRunOnceExactlyOncePerSlot(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) { contend(t, k, 50) })
}

func TestRunOnceClaimExactlyOncePerSlot(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) { contend(t, k, 20, ormlock.WithClaim()) })
}

// The detector of TestRunOnceExactlyOncePerSlot works: a plain duplicate
// INSERT does show up in the server log.
func TestRunOnceDuplicateKeyDetector(t *testing.T) {
	k := testdb.Postgres
	db, _ := openGorm(t, k)
	tbl := ledgerTable(t, k, db)
	off := logOffset(t, k)
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
	assertNoDuplicateKeyLogged(t, k, off)
	_, err := testdb.AdminDB(t, k).Exec("INSERT INTO "+tbl+" (job, slot, status, owner, started_at) VALUES ($1, $2, 'done', 'x', now())", job, slotAt(0))
	if err == nil {
		t.Fatal("plain duplicate INSERT succeeded")
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(logLines(t, k, off, "duplicate key")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a real duplicate-key error never reached the server log: the detector is blind")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestRunOnceFailedFnRetries(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := openGorm(t, k)
		tbl := ledgerTable(t, k, db)
		work := table(t, k, db)
		job := "retry-" + t.Name()
		opt := ormlock.WithLedgerTable(tbl)
		boom := errors.New("boom")
		err := gormlock.RunOnce(db, job, slotAt(1), func(tx *gorm.DB) error {
			if err := tx.Exec("INSERT INTO " + work + " (id) VALUES (1)").Error; err != nil {
				return err
			}
			return boom
		}, opt)
		if err != boom {
			t.Fatalf("err = %v, want fn's error unchanged", err)
		}
		if rs := runs(t, db, tbl, job); len(rs) != 0 {
			t.Fatalf("ledger after a failed run: %+v, want no row", rs)
		}
		if n := count(t, db, work); n != 0 {
			t.Fatalf("work rows after a failed run = %d, want 0", n)
		}
		if !rawFree(t, k, keys.NameValue(keys.RunKey(job, slotAt(1)))) {
			t.Fatal("lock still held after a failed run")
		}
		// a later trigger retries
		if err := gormlock.RunOnce(db, job, slotAt(1), func(tx *gorm.DB) error {
			return tx.Exec("INSERT INTO " + work + " (id) VALUES (1)").Error
		}, opt); err != nil {
			t.Fatalf("retry: %v", err)
		}
		rs := runs(t, db, tbl, job)
		if len(rs) != 1 || rs[0].Status != ormlock.RunDone || !rs[0].Slot.Equal(slotAt(1)) {
			t.Fatalf("ledger after retry: %+v", rs)
		}
		called := false
		err = gormlock.RunOnce(db, job, slotAt(1), func(*gorm.DB) error { called = true; return nil }, opt)
		if !errors.Is(err, ormlock.ErrAlreadyDone) || !errors.Is(err, gormlock.ErrAlreadyDone) || called {
			t.Fatalf("third run: err=%v called=%v, want ErrAlreadyDone without calling fn", err, called)
		}
		if !strings.HasPrefix(err.Error(), "ormlock: ") {
			t.Errorf("error text %q lacks the ormlock: prefix", err)
		}
	})
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

func TestMigrate(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := openGorm(t, k)
		name := "m_" + keyhashHex(t.Name())
		t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + name) })
		off := logOffset(t, k)
		// replicas starting together: concurrent and repeated Migrate calls
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			other, _ := openGorm(t, k)
			wg.Go(func() { errs[i] = gormlock.Migrate(other, ormlock.WithLedgerTable(name)) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("concurrent Migrate %d: %v", i, err)
			}
		}
		if err := gormlock.Migrate(db, ormlock.WithLedgerTable(name)); err != nil {
			t.Fatalf("Migrate again: %v", err)
		}
		assertNoDuplicateKeyLogged(t, k, off)
		if !tableExists(t, k, name) {
			t.Fatalf("table %s not created", name)
		}

		// the plugin's ledger table applies to Migrate, RunOnce and Runs
		pname := "p_" + keyhashHex(t.Name())
		t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + pname) })
		pdb, _ := openGorm(t, k)
		if err := pdb.Use(gormlock.New(ormlock.WithLedgerTable(pname))); err != nil {
			t.Fatal(err)
		}
		if err := gormlock.Migrate(pdb); err != nil {
			t.Fatal(err)
		}
		job := "plugin-" + t.Name()
		if err := gormlock.RunOnce(pdb, job, slotAt(0), func(*gorm.DB) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if rs, err := gormlock.Runs(pdb, job, 5); err != nil || len(rs) != 1 {
			t.Fatalf("Runs via the plugin's table: %v %v", rs, err)
		}
		if rs := runs(t, db, pname, job); len(rs) != 1 {
			t.Fatalf("row not in the plugin's table: %v", rs)
		}
	})
}

func tableExists(t *testing.T, k testdb.Kind, name string) bool {
	t.Helper()
	var n int
	q := "SELECT count(*) FROM information_schema.tables WHERE table_name = $1"
	if k.Dialect() == "mysql" {
		q = "SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?"
	}
	if err := testdb.AdminDB(t, k).QueryRow(q, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

func TestLedgerBadTableNames(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		// a pool that is already closed: any statement would fail with
		// "sql: database is closed", so ErrInvalidArgument proves that
		// nothing was sent
		closed := testdb.Open(t, k)
		db := gormOn(t, k, closed)
		closed.Close()
		for _, name := range []string{"runs; DROP TABLE x", "", strings.Repeat("a", 64), "1runs", "a-b", `r"s`, "r`s", "schema.runs", "ré"} {
			opt := ormlock.WithLedgerTable(name)
			if err := gormlock.Migrate(db, opt); !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "table name") {
				t.Errorf("Migrate(%q): %v, want ErrInvalidArgument naming the table", name, err)
			}
			if err := gormlock.RunOnce(db, "j", slotAt(0), func(*gorm.DB) error { return nil }, opt); !errors.Is(err, ormlock.ErrInvalidArgument) {
				t.Errorf("RunOnce with table %q: %v", name, err)
			}
			if _, err := gormlock.Runs(db, "j", 1, opt); !errors.Is(err, ormlock.ErrInvalidArgument) {
				t.Errorf("Runs with table %q: %v", name, err)
			}
		}
		if err := config.ValidIdentifier(ormlock.ErrInvalidArgument, "t", strings.Repeat("a", 63)); err != nil {
			t.Errorf("63-byte name rejected: %v", err)
		}
		// a missing table is reported with a hint
		live, _ := openGorm(t, k)
		for _, mode := range []ormlock.Option{nil, ormlock.WithClaim()} {
			err := gormlock.RunOnce(live, "j", slotAt(0), func(*gorm.DB) error { return nil }, ormlock.WithLedgerTable("no_such_ledger"), mode)
			if err == nil || !strings.Contains(err.Error(), "create it with Migrate") {
				t.Errorf("missing table: %v", err)
			}
		}
	})
}

func TestRuns(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		db, _ := openGorm(t, k)
		tbl := ledgerTable(t, k, db)
		job := "audit-" + t.Name()
		opt := ormlock.WithLedgerTable(tbl)
		berlin, err := time.LoadLocation("Europe/Berlin")
		if err != nil {
			t.Skip(err)
		}
		// slots given in Berlin time, with nanoseconds: stored as the UTC
		// instant, truncated to microseconds
		slot := func(day int) time.Time { return time.Date(2031, 3, day, 0, 0, 0, 123456789, berlin) }
		if err := gormlock.RunOnce(db, job, slot(1), func(*gorm.DB) error { return nil }, opt, ormlock.WithOwner("a")); err != nil {
			t.Fatal(err)
		}
		if err := gormlock.RunOnce(db, job, slot(2), func(*gorm.DB) error { return errors.New("disk full") }, opt, ormlock.WithClaim(), ormlock.WithOwner("b")); err == nil {
			t.Fatal("want fn's error")
		}
		if err := gormlock.RunOnce(db, job, slot(3), func(*gorm.DB) error { time.Sleep(20 * time.Millisecond); return nil }, opt, ormlock.WithClaim(), ormlock.WithOwner("c")); err != nil {
			t.Fatal(err)
		}
		// another job's run is not listed
		if err := gormlock.RunOnce(db, job+"-other", slot(4), func(*gorm.DB) error { return nil }, opt); err != nil {
			t.Fatal(err)
		}
		rs, err := gormlock.Runs(db, job, 10, opt)
		if err != nil {
			t.Fatal(err)
		}
		want := []struct {
			day    int
			status ormlock.RunStatus
			owner  string
			err    string
		}{{3, ormlock.RunDone, "c", ""}, {2, ormlock.RunFailed, "b", "disk full"}, {1, ormlock.RunDone, "a", ""}}
		if len(rs) != len(want) {
			t.Fatalf("Runs = %+v, want %d rows", rs, len(want))
		}
		for i, w := range want {
			r := rs[i]
			ws := keys.NormalizeSlot(slot(w.day))
			if r.Job != job || !r.Slot.Equal(ws) || r.Slot.Location() != time.UTC || r.Status != w.status || r.Owner != w.owner || r.Error != w.err {
				t.Errorf("run %d = %+v, want slot %v %s by %s error %q", i, r, ws, w.status, w.owner, w.err)
			}
			if r.Started.IsZero() || r.Finished.Before(r.Started) || r.Duration != r.Finished.Sub(r.Started) || r.Started.Location() != time.UTC {
				t.Errorf("run %d times: started %v finished %v duration %v", i, r.Started, r.Finished, r.Duration)
			}
		}
		if rs[0].Duration < 10*time.Millisecond {
			t.Errorf("claim run that slept 20ms lasted %v by the ledger", rs[0].Duration)
		}
		if d := time.Since(rs[0].Started); d < -time.Minute || d > time.Hour {
			t.Errorf("started %v is not close to now (server clock in UTC?)", rs[0].Started)
		}
		t.Logf("durations: %v %v %v", rs[0].Duration, rs[1].Duration, rs[2].Duration)
		if rs, err := gormlock.Runs(db, job, 2, opt); err != nil || len(rs) != 2 || !rs[1].Slot.Equal(keys.NormalizeSlot(slot(2))) {
			t.Fatalf("Runs limit 2 = %+v, %v", rs, err)
		}
		if rs, err := gormlock.Runs(db, "never-ran", 5, opt); err != nil || len(rs) != 0 {
			t.Fatalf("Runs of an unknown job = %+v, %v", rs, err)
		}
		if _, err := gormlock.Runs(db, job, 0, opt); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Errorf("limit 0: %v", err)
		}
		if _, err := gormlock.Runs(db, "", 5, opt); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Errorf("empty job: %v", err)
		}
		if _, err := gormlock.Runs(nil, job, 5, opt); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Errorf("nil db: %v", err)
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
