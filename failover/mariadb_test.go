package failover_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // driver "mysql"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/sqllock"
)

// sqlVerbs calls every sqllock verb once on db with fn counting its calls,
// and returns each verb's error.
func sqlVerbs(db *sql.DB, ran *int) map[string]error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	txFn := func(context.Context, *sql.Tx) error { *ran++; return nil }
	fn := func(context.Context) error { *ran++; return nil }
	slot := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return map[string]error{
		"Transaction":          sqllock.Transaction(ctx, db, "refused", txFn),
		"Session":              sqllock.Session(ctx, db, "refused", fn),
		"Lead":                 sqllock.Lead(ctx, db, "refused", fn),
		"RunOnce":              sqllock.RunOnce(ctx, db, "refused", slot, txFn),
		"RunOnce (claim)":      sqllock.RunOnce(ctx, db, "refused", slot, txFn, ormlock.WithClaim()),
		"Transaction (fenced)": sqllock.Transaction(ctx, db, "refused", txFn, ormlock.WithFencing()),
	}
}

// assertRefused fails t unless every verb was refused with
// ErrUnsupportedDialect naming why, and fn never ran.
func assertRefused(t *testing.T, where, why string, errs map[string]error, ran int) {
	t.Helper()
	for v, err := range errs {
		if !errors.Is(err, ormlock.ErrUnsupportedDialect) || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: %s: %v, want ErrUnsupportedDialect naming %q", where, v, err, why)
		}
	}
	if ran != 0 {
		t.Errorf("%s: fn ran %d times", where, ran)
	}
}

// TestMariaDBReplication: the replica (read_only) is refused for every
// verb before anything runs; after the replica is promoted, a done slot
// stays done and, with semi-synchronous replication, every token exceeds
// those issued before; with asynchronous replication and the link frozen
// the promoted replica issues the lost tokens again, until AdvanceFences.
func TestMariaDBReplication(t *testing.T) {
	topology(t)
	for _, semi := range []bool{true, false} {
		name := "async"
		if semi {
			name = "semisync"
		}
		t.Run(name, func(t *testing.T) { mariaDBReplication(t, semi) })
	}
}

func mariaDBReplication(t *testing.T, semi bool) {
	r := testdb.StartMariaDBReplication(t, semi)
	db := openPool(t, "mysql", r.FrontDSN())
	ctx := context.Background()
	if err := sqllock.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	r.WaitReplayed(t)

	assertAllRefused(t, "replica", "read_only", "mysql", openPool(t, "mysql", r.Replica.DSN()))

	slot0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	slot1 := slot0.Add(time.Hour)
	var before []int64
	for range 3 {
		before = append(before, token(t, db, "my-k"))
	}
	if !runSlot(t, db, "my-job", slot0) {
		t.Fatal("slot 0 did not run")
	}
	r.WaitReplayed(t)
	// The last tokens: semi-synchronous, acknowledged by the replica and
	// the primary killed at once after them; asynchronous, issued with
	// the link frozen.
	if !semi {
		r.Link.Freeze() // the replica receives nothing from here on
	}
	var lost []int64
	for range 3 {
		lost = append(lost, token(t, db, "my-k"))
	}
	if !semi && !runSlot(t, db, "my-job", slot1) {
		t.Fatal("slot 1 did not run")
	}
	maxBefore := lost[len(lost)-1]
	if semi {
		yes, no := r.SemiSyncCounts(t)
		t.Logf("figure: MariaDB semi-synchronous: %d commits acknowledged by the replica, %d without", yes, no)
		if yes < len(lost) || no != 0 {
			t.Fatalf("semi-synchronous replication did not acknowledge every commit (%d acknowledged, %d not)", yes, no)
		}
	}
	// A Session and a Transaction mid-fn when the primary dies.
	inFn := make(chan struct{}, 2)
	release := make(chan struct{})
	type outcome struct {
		verb  string
		err   error
		cause error
		at    time.Time
	}
	outcomes := make(chan outcome, 2)
	go func() {
		var o outcome
		o.err = sqllock.Session(ctx, db, "my-session", func(ctx context.Context) error {
			inFn <- struct{}{}
			<-ctx.Done()
			o.cause, o.at = context.Cause(ctx), time.Now()
			return ctx.Err()
		}, ormlock.WithKeepalive(keepalive))
		o.verb = "Session"
		outcomes <- o
	}()
	go func() {
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		var o outcome
		o.err = sqllock.Transaction(tctx, db, "my-tx", func(ctx context.Context, tx *sql.Tx) error {
			inFn <- struct{}{}
			<-release
			return nil
		})
		o.verb, o.at = "Transaction", time.Now()
		outcomes <- o
	}()
	<-inFn
	<-inFn
	killed := time.Now()
	r.Primary.StopImmediate(t)
	close(release)
	for range 2 {
		o := <-outcomes
		took := o.at.Sub(killed)
		t.Logf("figure: MariaDB %s primary killed (SIGKILL): %s learnt the loss after %v (keepalive %v): %v",
			map[bool]string{true: "semi-synchronous", false: "asynchronous"}[semi], o.verb, took.Round(time.Millisecond), keepalive, o.err)
		switch o.verb {
		case "Session":
			if !errors.Is(o.cause, ormlock.ErrLockLost) || !errors.Is(o.err, ormlock.ErrLockLost) {
				t.Errorf("Session: cause %v, returned %v; want ErrLockLost", o.cause, o.err)
			}
			if took > 2*keepalive+500*time.Millisecond {
				t.Errorf("Session learnt the loss after %v, want within two keepalives", took)
			}
		case "Transaction":
			if !errors.Is(o.err, ormlock.ErrLockLost) && !errors.Is(o.err, ormlock.ErrCommitUnknown) {
				t.Errorf("Transaction: %v, want ErrLockLost or ErrCommitUnknown", o.err)
			}
		}
	}
	r.Promote(t)
	r.SwitchFront()
	db.SetMaxIdleConns(0)
	db.SetMaxIdleConns(2)

	if runSlot(t, db, "my-job", slot0) {
		t.Error("slot 0, done before the promotion, ran again")
	}
	next := token(t, db, "my-k")
	t.Logf("figure: MariaDB %s: tokens %v replicated, %v issued last (asynchronous: with the link frozen), first token on the promoted replica %d",
		map[bool]string{true: "semi-synchronous", false: "asynchronous"}[semi], before, lost, next)
	if semi {
		if next <= maxBefore {
			t.Errorf("semi-synchronous: token %d after the promotion, not greater than %d", next, maxBefore)
		}
		return
	}
	if next != lost[0] {
		t.Errorf("asynchronous: the promoted replica issued %d, want %d again (the hazard did not show)", next, lost[0])
	}
	if !runSlot(t, db, "my-job", slot1) {
		t.Error("asynchronous: slot 1, done on the old primary only, did not run again (the hazard did not show)")
	}
	advancePastLost(t, ctx, db, "my-k", maxBefore, "MariaDB asynchronous")
}
