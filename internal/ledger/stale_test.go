package ledger

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

// A claim-mode run that records its end and releases its lock between the
// read of its 'running' row and the look-up of its lock is not stale: the
// lock is free by then, and only the second read of the row (which finds
// it done) tells. The run is made to end at exactly that point, between
// the two reads, on every server; the same read order on a run that is
// still going on, and on a row whose owner died, tells them apart.
func TestStaleRunEndsBetweenReads(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		ctx := context.Background()
		tbl, db := testTable(t, k, "stale")
		cfg := config.New(ormlock.WithLedgerTable(tbl.name), ormlock.WithOwner("replica-a"), ormlock.WithClaim())
		job := "stale-race"
		t.Cleanup(func() { testHookStale = nil })

		// reads on db, the row read again in a transaction of its own (the
		// verbs' way), then in one READ COMMITTED transaction (the web
		// view's way)
		for i, inTx := range []bool{false, true} {
			slot := testdb.Slot(3 + i)
			end := claimUntil(t, tbl, db, cfg, job, slot)
			var q interface {
				lockproto.Querier
				Querier
			} = db
			fresh := db
			if inTx {
				tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted, ReadOnly: true})
				if err != nil {
					t.Fatal(err)
				}
				q, fresh = tx, nil
				defer func() { _ = tx.Rollback() }() // once more at the end: harmless
			}
			read := func() []Row {
				t.Helper()
				rs, err := tbl.Runs(ctx, q, "", job, 1)
				if err != nil || len(rs) != 1 || rs[0].Status != StatusRunning || !rs[0].Slot.Equal(slot) {
					t.Fatalf("Runs: %+v, %v; want the running row of %v", rs, err, slot)
				}
				return rs
			}
			// going on: held, not stale
			rs := read()
			if _, err := tbl.MarkStale(ctx, q, fresh, cfg, rs, 0); err != nil || rs[0].Stale {
				t.Fatalf("a run going on: %+v, %v; want running, not stale", rs[0], err)
			}
			// ends between the row's read and the lock's
			rs = read()
			testHookStale = func() {
				if err := end(); err != nil {
					t.Errorf("Claimed: %v", err)
				}
			}
			_, err := tbl.MarkStale(ctx, q, fresh, cfg, rs, 0)
			testHookStale = nil
			if err != nil {
				t.Fatal(err)
			}
			if h, err := tbl.runLock(ctx, db, cfg, job, slot); err != nil || h.Held {
				t.Fatalf("the run's lock after it ended: %+v, %v", h, err)
			}
			if rs[0].Stale || rs[0].Status != StatusDone {
				t.Fatalf("in a transaction %v: a run that recorded its end, then released its lock, between the reads: %+v; want done, not stale", inTx, rs[0])
			}
			if tx, ok := q.(*sql.Tx); ok {
				_ = tx.Rollback()
			}
		}

		// a row whose owner died: stale, and still running
		dead := testdb.Slot(9)
		if _, err := db.ExecContext(ctx, "INSERT INTO "+tbl.q+" (namespace, job, slot, status, owner, started_at) VALUES ("+
			placeholders(tbl, 6)+")", "", job, tbl.slotArg(dead), StatusRunning, "dead/1", tbl.slotArg(dead)); err != nil {
			t.Fatal(err)
		}
		rs, err := tbl.Runs(ctx, db, "", job, 10)
		if err != nil || len(rs) != 3 {
			t.Fatalf("Runs: %+v, %v", rs, err)
		}
		if _, err := tbl.MarkStale(ctx, db, db, cfg, rs, 0); err != nil {
			t.Fatal(err)
		}
		if !rs[0].Stale || rs[0].Status != StatusRunning || rs[0].Owner != "dead/1" || rs[1].Stale || rs[2].Stale {
			t.Fatalf("a dead owner's row, then done ones: %+v; want the first stale", rs)
		}
		testdb.AssertNoLeaks(t, k, db)
	})
}

// claimUntil starts a claim-mode run of (job, slot) on db whose fn waits,
// and returns once fn runs; end lets fn return and waits for the run to
// record its end and release its lock, and returns the run's error.
func claimUntil(t *testing.T, tbl *Table, db *sql.DB, cfg config.Config, job string, slot time.Time) (end func() error) {
	t.Helper()
	started, release := make(chan struct{}), make(chan struct{})
	ended := make(chan error, 1)
	go func() {
		op, err := lockproto.NewOp(tbl.d, "ledger test", keys.RunKey(job, slot), cfg)
		if err == nil {
			var r *Run
			if r, err = NewRun("ledger test", op, job, slot, nil); err == nil {
				err = r.Claimed(context.Background(), db, func(context.Context) error {
					close(started)
					<-release
					return nil
				})
			}
		}
		ended <- err
	}()
	select {
	case <-started:
	case err := <-ended:
		t.Fatalf("Claimed: %v", err)
	}
	var once sync.Once
	end = func() error {
		var err error
		once.Do(func() {
			close(release)
			err = <-ended
		})
		return err
	}
	t.Cleanup(func() { _ = end() })
	return end
}

// placeholders is n statement placeholders for tbl's dialect.
func placeholders(tbl *Table, n int) string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = "?"
		if tbl.pg() {
			ps[i] = "$" + strconv.Itoa(i+1)
		}
	}
	return strings.Join(ps, ", ")
}
