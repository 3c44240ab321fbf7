package failover_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/sqllock"
)

// openFront opens a pool of the replication's front, closed at the end.
func openFront(t *testing.T, r *testdb.PGReplication) *sql.DB {
	t.Helper()
	return openPool(t, "pgx", r.FrontDSN())
}

// token takes the fenced lock key once in a Transaction and returns its
// token.
func token(t *testing.T, db *sql.DB, key string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var tok int64
	err := sqllock.Transaction(ctx, db, key, func(ctx context.Context, tx *sql.Tx) error {
		tok, _ = ormlock.FencingToken(ctx)
		return nil
	}, ormlock.WithFencing(), ormlock.WithWait(10*time.Second))
	if err != nil {
		t.Fatalf("Transaction %q: %v", key, err)
	}
	return tok
}

// runSlot runs RunOnce of job's slot and reports whether fn ran.
func runSlot(t *testing.T, db *sql.DB, job string, slot time.Time) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ran := false
	err := sqllock.RunOnce(ctx, db, job, slot, func(ctx context.Context, tx *sql.Tx) error {
		ran = true
		return nil
	})
	if err != nil && !errors.Is(err, ormlock.ErrAlreadyDone) {
		t.Fatalf("RunOnce %s %v: %v", job, slot, err)
	}
	return ran
}

// advancePastLost moves every fencing counter on db by 1,000,000
// (sqllock.AdvanceFences, the remedy once a promoted server issues lost
// tokens again) and checks that key's next token exceeds maxBefore, the
// greatest issued before the promotion; topology heads the figure logged.
func advancePastLost(t *testing.T, ctx context.Context, db *sql.DB, key string, maxBefore int64, topology string) {
	t.Helper()
	n, err := sqllock.AdvanceFences(ctx, db, 1_000_000)
	if err != nil || n < 1 {
		t.Fatalf("AdvanceFences: %d, %v", n, err)
	}
	after := token(t, db, key)
	t.Logf("figure: %s: after AdvanceFences(1000000): %d counters moved, next token %d (greatest before the promotion %d)", topology, n, after, maxBefore)
	if after <= maxBefore {
		t.Errorf("after AdvanceFences the token is %d, not greater than %d", after, maxBefore)
	}
}

// TestPGAsyncFailoverHazard makes the hazard of an asynchronous standby
// happen: tokens and a done slot that the primary committed while the
// replication link was frozen are missing on the promoted standby, which
// issues the same tokens again and runs the slot again. AdvanceFences is
// the remedy for the tokens: after it every token is greater than all
// issued before the promotion.
func TestPGAsyncFailoverHazard(t *testing.T) {
	topology(t)
	r := testdb.StartPGReplication(t, false)
	db := openFront(t, r)
	ctx := context.Background()
	if err := sqllock.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	r.WaitReplayed(t)
	standby, err := sql.Open("pgx", r.Standby.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Close()
	assertAllRefused(t, "hot standby", "standby", "postgres", standby)
	slotA := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	slotB := slotA.Add(time.Hour)
	for range 3 {
		token(t, db, "async-k")
	}
	if !runSlot(t, db, "async-job", slotA) {
		t.Fatal("slot A did not run")
	}
	r.WaitReplayed(t)
	replicated := token(t, db, "async-k")
	r.WaitReplayed(t)

	r.Link.Freeze() // the standby receives nothing from here on
	var lost []int64
	for range 3 {
		lost = append(lost, token(t, db, "async-k"))
	}
	if !runSlot(t, db, "async-job", slotB) {
		t.Fatal("slot B did not run")
	}
	maxBefore := lost[len(lost)-1]

	r.Primary.StopImmediate(t)
	r.Promote(t)
	r.SwitchFront()
	db.SetMaxIdleConns(0) // no connection of the old primary is reused
	db.SetMaxIdleConns(2)

	again := token(t, db, "async-k")
	t.Logf("figure: asynchronous failover: tokens 1..%d replicated, %v issued while the link was frozen, first token on the promoted standby %d",
		replicated, lost, again)
	if again > maxBefore {
		t.Fatalf("the promoted standby issued %d, greater than every token before (%d): the hazard did not show (was the link frozen?)", again, maxBefore)
	}
	if again != lost[0] {
		t.Errorf("promoted standby issued %d, want the first token lost in the lag (%d) again", again, lost[0])
	}
	if runSlot(t, db, "async-job", slotA) {
		t.Error("slot A, done and replicated before the promotion, ran again")
	}
	if !runSlot(t, db, "async-job", slotB) {
		t.Error("slot B, done on the old primary only, did not run again: the hazard did not show")
	}

	advancePastLost(t, ctx, db, "async-k", maxBefore, "PostgreSQL asynchronous")
}

// TestServerCheckAskedAgainAfterLoss: a pool whose server check passed on
// the primary loses its holder's connection when the address it reaches
// moves to a hot standby (a failover pointed the wrong way, or a demoted
// primary back as a standby). The pool's cached verdict must not outlive
// the loss: the next verb asks again and is refused on the standby, fn
// never run.
func TestServerCheckAskedAgainAfterLoss(t *testing.T) {
	topology(t)
	r := testdb.StartPGReplication(t, false)
	db := openFront(t, r)
	ctx := context.Background()
	txFn := func(context.Context, *sql.Tx) error { return nil }
	if err := sqllock.Transaction(ctx, db, "reask", txFn); err != nil {
		t.Fatalf("Transaction on the primary: %v", err)
	}
	lost := make(chan error, 1)
	inFn := make(chan struct{})
	go func() {
		lost <- sqllock.Session(ctx, db, "reask-session", func(ctx context.Context) error {
			close(inFn)
			<-ctx.Done()
			return context.Cause(ctx)
		}, ormlock.WithKeepalive(300*time.Millisecond))
	}()
	<-inFn
	r.Front.SetUpstream(r.Standby.Addr())
	r.Front.Cut()
	select {
	case err := <-lost:
		if !errors.Is(err, ormlock.ErrLockLost) {
			t.Fatalf("Session: %v, want ErrLockLost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Session did not learn of the loss in 10s")
	}
	ran := false
	err := sqllock.Transaction(ctx, db, "reask", func(context.Context, *sql.Tx) error { ran = true; return nil })
	if !errors.Is(err, ormlock.ErrUnsupportedDialect) || ran {
		t.Errorf("Transaction after the loss, the pool now on a standby: %v (fn ran: %v), want ErrUnsupportedDialect: the verdict cached on the primary was trusted", err, ran)
	}
}
