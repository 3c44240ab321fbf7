package conformance_test

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/stmtlog"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
	"github.com/ormlock/ormlock/keyhash"
)

// TestShapeRoundTrips counts, as TestTransactionRoundTrips does (the
// statements each call leaves in PostgreSQL's log, directly and behind
// PgBouncer, on a warm pool of one connection), the round trips of the
// lock shapes and of a transactional RunOnce: on the one-message path
// (gormlock, entlock, pgxlock) each costs the 2 of the plain transaction
// it guards, winners and losers alike: the set's keys, the semaphore's
// slots and RunOnce's ledger claim travel in the message that begins the
// transaction (docs/PROTOCOL.md, Round trips). sqllock's fn gets a
// *sql.Tx, which database/sql begins: its counts are sqlShapeRoundTrips'.
func TestShapeRoundTrips(t *testing.T) {
	forEachPostgresInTurn(t, func(t *testing.T, a adapter, k testdb.Kind) {
		sl := stmtlog.Start(t, k)
		db := sl.Open(t)
		enttest.Migrate(t, k)
		t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
		r := a.on(t, k.Dialect(), db)
		tbl := ledgerTable(t, k, r)
		ctx := context.Background()
		u := fmt.Sprintf("rts-%s-%s-%d", a.name, k, time.Now().UnixNano())
		names := make([]string, 8)
		for i := range names {
			names[i] = fmt.Sprintf("%s-all-%d", u, i)
		}
		set, sem, shared := ormlock.All(names...), ormlock.Semaphore(u+"-sem", 10), ormlock.Shared(u+"-shared")
		ran := 0
		fn := func(txn) error { ran++; return nil }
		winner := func(key ormlock.Key, opts ...ormlock.Option) func() error {
			return func() error { return r.Transaction(ctx, key, fn, opts...) }
		}
		loser := func(key ormlock.Key, opts ...ormlock.Option) func() error {
			return func() error {
				before := ran
				if err := r.Transaction(ctx, key, fn, opts...); !errors.Is(err, ormlock.ErrNotAcquired) || ran != before {
					return fmt.Errorf("%s: %v (fn ran: %v), want ErrNotAcquired", key, err, ran != before)
				}
				return nil
			}
		}
		job, slot := u+"-job", 0
		runOnce := func() error {
			slot++
			return r.RunOnce(ctx, job, testdb.Slot(slot), fn, ormlock.WithLedgerTable(tbl))
		}
		wait := ormlock.WithWait(2 * time.Second)
		counts := map[string][]string{
			"All of 8":                  sl.Count(t, winner(set)),
			"All of 8 (wait)":           sl.Count(t, winner(set, wait)),
			"Semaphore(10), slots free": sl.Count(t, winner(sem)),
			"Shared":                    sl.Count(t, winner(shared)),
			"RunOnce, a fresh slot":     sl.Count(t, runOnce),
			"ORM transaction, no lock":  sl.Count(t, func() error { return r.PlainTx(ctx) }),
			"Session, All of 8": sl.Count(t, func() error {
				return r.Session(ctx, set, func(context.Context) error { return nil })
			}),
		}
		if a.name == "pgxlock" {
			// the split protocol needs two connections: the others' counted
			// pool has one (pgxlock's lock connection comes from its own)
			counts["RunOnce, REPEATABLE READ"] = sl.Count(t, func() error {
				slot++
				return r.RunOnce(ctx, job, testdb.Slot(slot), fn, ormlock.WithLedgerTable(tbl),
					ormlock.WithTxOptions(&sql.TxOptions{Isolation: sql.LevelRepeatableRead}))
			})
		}
		// losers: the 5th key of the set, every slot, the key in
		// exclusive mode, and the run's lock, held by hand-written SQL
		hold := []string{canonical(names)[4], u + "-shared", ormlock.RunKey(job, testdb.Slot(slot+1)).String()}
		for i := 1; i <= 10; i++ {
			hold = append(hold, fmt.Sprintf("ormlock.semaphore:%s-sem#%d", u, i))
		}
		holdOn(t, k, hold) // on one connection, until the test ends
		counts["All of 8, loser"] = sl.Count(t, loser(set))
		counts["All of 8 (wait), loser"] = sl.Count(t, loser(set, ormlock.WithWait(20*time.Millisecond)))
		counts["Semaphore(10), loser"] = sl.Count(t, loser(sem))
		counts["Shared, loser"] = sl.Count(t, loser(shared))
		counts["RunOnce, loser"] = sl.Count(t, func() error {
			before := ran
			err := r.RunOnce(ctx, job, testdb.Slot(slot+1), fn, ormlock.WithLedgerTable(tbl))
			if !errors.Is(err, ormlock.ErrNotAcquired) || ran != before {
				return fmt.Errorf("RunOnce, lock held: %v (fn ran: %v), want ErrNotAcquired", err, ran != before)
			}
			return nil
		})
		if rs := runsOf(t, r, tbl, job); len(rs) != slot {
			t.Errorf("%d ledger rows, want %d (one per won slot, none for the refused one)", len(rs), slot)
		}
		want := map[string]int{}
		for c := range counts {
			want[c] = 2
		}
		// the split protocol (two connections, counted together): the lock
		// transaction's BEGIN+lock and ROLLBACK; fn's BEGIN, claim, mark
		// done, the lock's confirmation and COMMIT
		want["RunOnce, REPEATABLE READ"] = 7
		sqlShapeRoundTrips(a, want)
		for c, lines := range counts {
			t.Logf("%s: %d round trips: %q", c, len(lines), lines)
			if len(lines) != want[c] {
				t.Errorf("%s: %d statements in the server log, want %d: %q", c, len(lines), want[c], lines)
			}
		}
		if first := counts["All of 8"]; a.name != "sqllock" && len(first) > 0 && !(strings.Contains(first[0], "BEGIN") && strings.Count(first[0], "pg_try_advisory_xact_lock") == 8) {
			t.Errorf("BEGIN and the set's keys are not one message: %q", first)
		}
	})
}

// canonical is names in the canonical order of a set on PostgreSQL: by
// the lock tag (classid, objid) of each key.
func canonical(names []string) []string {
	out := slices.Clone(names)
	slices.SortFunc(out, func(a, b string) int {
		ka, kb := uint64(keyhash.Int64(a)), uint64(keyhash.Int64(b))
		return cmp.Or(cmp.Compare(ka>>32, kb>>32), cmp.Compare(uint32(ka), uint32(kb)))
	})
	return out
}

// canonicalOn is names in the canonical order of a set on kind k's server:
// canonical on PostgreSQL; on MySQL/MariaDB by name, which for the short
// lower-case ASCII names of the tests is the lower-cased name's order.
func canonicalOn(k testdb.Kind, names []string) []string {
	if k.Dialect() == "postgres" {
		return canonical(names)
	}
	return slices.Sorted(slices.Values(names))
}

// sqlShapeRoundTrips sets sqllock's round trips in want: database/sql
// begins fn's *sql.Tx with a BEGIN of its own; then each key of a shape is
// a statement of its own (shapes.go), RunOnce's ledger claim and its mark
// done are statements of their own too.
func sqlShapeRoundTrips(a adapter, want map[string]int) {
	// sqllock.Open's pool: database/sql's BEGIN carries the lock and the
	// claim, its COMMIT the mark done (2 everywhere)
	if a.name != "sqllock" {
		return
	}
	for c, n := range map[string]int{
		"All of 8": 10, "All of 8 (wait)": 18, "Semaphore(10), slots free": 3, "Shared": 3,
		"RunOnce, a fresh slot": 5, "All of 8, loser": 7, "All of 8 (wait), loser": 12,
		"Semaphore(10), loser": 12, "Shared, loser": 3, "RunOnce, loser": 3,
	} {
		want[c] = n
	}
}
