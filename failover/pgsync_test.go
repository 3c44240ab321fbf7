package failover_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/sqllock"
)

// keepalive is the Session and Lead keepalive of the failover tests.
const keepalive = 500 * time.Millisecond

// held is what one holder saw: its token, and when and why its ctx ended.
type held struct {
	verb  string
	key   string
	token int64
	end   time.Time
	cause error
	err   error // the verb's own error
}

// TestPGSyncFailover promotes the synchronous standby of a PostgreSQL
// primary while a holder of every verb is mid-fn, with the old primary
// stopped at once (pg_ctl stop -m immediate) or cut off from its clients
// (their connections frozen, the server still up and holding their
// locks), and clients re-pointed by a proxy moved to the new primary, or
// naming both servers in a multi-host DSN with
// target_session_attrs=read-write (the old primary stopped). Each
// holder must learn of the loss (Session and Lead: ctx cause ErrLockLost
// within two keepalives; Transaction and RunOnce: ErrLockLost or
// ErrCommitUnknown, never nil), no done slot may run again on the new
// primary, every token issued after the promotion must exceed every token
// a fn saw before it, and a stale holder's fenced write is refused there.
func TestPGSyncFailover(t *testing.T) {
	topology(t)
	for _, mode := range []string{"stopped", "cut-off", "multi-host"} {
		t.Run(mode, func(t *testing.T) { pgSyncFailover(t, mode) })
	}
}

func pgSyncFailover(t *testing.T, mode string) {
	r := testdb.StartPGReplication(t, true)
	db := openFront(t, r)
	if mode == "multi-host" {
		// the clients name both servers and want the writable one
		db.Close()
		var err error
		db, err = sql.Open("pgx", fmt.Sprintf("postgres://postgres@%s,%s/ormlock?sslmode=disable&target_session_attrs=read-write&connect_timeout=5",
			r.Primary.Addr(), r.Standby.Addr()))
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(20)
		db.SetConnMaxIdleTime(time.Second)
		t.Cleanup(func() { db.Close() })
	}
	ctx := context.Background()
	if err := sqllock.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL, fence bigint NOT NULL DEFAULT 0)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO accounts (id, balance) VALUES (1, 0)"); err != nil {
		t.Fatal(err)
	}
	fenced := []ormlock.Option{ormlock.WithFencing(), ormlock.WithKeepalive(keepalive)}
	slot0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	slot1 := slot0.Add(time.Hour)
	// Tokens before the holders, and a done slot.
	for range 3 {
		token(t, db, "sync-tx")
	}
	if !runSlot(t, db, "sync-job", slot0) {
		t.Fatal("slot 0 did not run")
	}

	var (
		mu      sync.Mutex
		results = map[string]*held{}
		ready   sync.WaitGroup
		done    sync.WaitGroup
		release = make(chan struct{}) // Transaction's and RunOnce's fn return
	)
	record := func(h *held) { mu.Lock(); results[h.verb] = h; mu.Unlock() }
	// learnt gets the verbs whose fn saw its ctx end, with the time and cause.
	learnt := make(chan held, 8)
	hctx, stopLead := context.WithCancel(ctx)
	defer stopLead()
	txCtx, txCancel := context.WithCancel(ctx)
	defer txCancel()
	ready.Add(5)
	done.Add(4)
	// Session: fn waits for its ctx to end.
	go func() {
		defer done.Done()
		h := &held{verb: "Session", key: "sync-session"}
		h.err = sqllock.Session(hctx, db, h.key, func(ctx context.Context) error {
			h.token, _ = ormlock.FencingToken(ctx)
			ready.Done()
			<-ctx.Done()
			h.end, h.cause = time.Now(), context.Cause(ctx)
			learnt <- *h
			return ctx.Err()
		}, fenced...)
		record(h)
	}()
	// Lead: its first term waits for the loss; the next term, on the new
	// primary, records its token and resigns.
	leadNext := &held{verb: "Lead (next term)", key: "sync-lead"}
	go func() {
		defer done.Done()
		h := &held{verb: "Lead", key: "sync-lead"}
		terms := 0
		h.err = sqllock.Lead(hctx, db, h.key, func(ctx context.Context) error {
			terms++
			if terms == 1 {
				h.token, _ = ormlock.FencingToken(ctx)
				ready.Done()
				<-ctx.Done()
				h.end, h.cause = time.Now(), context.Cause(ctx)
				learnt <- *h
				return nil
			}
			tok, _ := ormlock.FencingToken(ctx)
			mu.Lock()
			leadNext.token, leadNext.end = tok, time.Now()
			mu.Unlock()
			return nil // resign
		}, fenced...)
		record(h)
		record(leadNext)
	}()
	// Transaction and RunOnce: fn returns once the primary is gone, and
	// the COMMIT goes to the old primary.
	go func() {
		defer done.Done()
		h := &held{verb: "Transaction", key: "sync-tx"}
		h.err = sqllock.Transaction(txCtx, db, h.key, func(ctx context.Context, tx *sql.Tx) error {
			h.token, _ = ormlock.FencingToken(ctx)
			ready.Done()
			<-release
			_, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance + 1 WHERE id = 1")
			return err
		}, fenced...)
		h.end = time.Now()
		record(h)
	}()
	go func() {
		defer done.Done()
		h := &held{verb: "RunOnce", key: "sync-job"}
		h.err = sqllock.RunOnce(txCtx, db, "sync-job", slot1, func(ctx context.Context, tx *sql.Tx) error {
			h.token, _ = ormlock.FencingToken(ctx)
			ready.Done()
			<-release
			return nil
		}, fenced...)
		h.end = time.Now()
		record(h)
	}()
	// RunOnce in claim mode: fn's ctx ends with ErrLockLost.
	claimDone := make(chan *held, 1)
	go func() {
		h := &held{verb: "RunOnce (claim)", key: "sync-claim"}
		h.err = sqllock.RunOnce(hctx, db, "sync-claim", slot1, func(ctx context.Context, tx *sql.Tx) error {
			h.token, _ = ormlock.FencingToken(ctx)
			ready.Done()
			<-ctx.Done()
			h.end, h.cause = time.Now(), context.Cause(ctx)
			learnt <- *h
			return ctx.Err()
		}, append(fenced, ormlock.WithClaim())...)
		claimDone <- h
	}()
	waitGroup(t, &ready, 30*time.Second, "holders in fn")

	start := time.Now()
	switch mode {
	case "stopped", "multi-host":
		r.Primary.StopImmediate(t)
		r.Promote(t)
		r.SwitchFront()
	case "cut-off":
		r.Front.Freeze() // the holders' connections hang; the old primary still holds their locks
		r.Promote(t)
		r.Front.SetUpstream(fmt.Sprintf("127.0.0.1:%d", r.Standby.Port()))
	}
	promoted := time.Since(start)
	close(release)
	first := map[string]held{}
	timeout := time.After(20 * time.Second)
	for len(first) < 3 {
		select {
		case h := <-learnt:
			first[h.verb] = h
		case <-timeout:
			t.Fatalf("after 20s only %d of Session, Lead and claim-mode RunOnce learnt the loss", len(first))
		}
	}
	// The frozen connections are dropped (as a TCP timeout would end
	// them): the releases and the COMMITs that wait on them return. A
	// COMMIT to a cut-off synchronous primary that never answers waits
	// forever; the verbs' ctx bounds it.
	r.Front.Cut()
	time.AfterFunc(10*time.Second, txCancel)
	record(<-claimDone)
	waitFor(t, 30*time.Second, "Lead's next term", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return !leadNext.end.IsZero()
	})
	stopLead()
	waitGroup(t, &done, 60*time.Second, "holders to return")
	mu.Lock()
	defer mu.Unlock()

	t.Logf("figure: %s synchronous primary: standby promoted %v after the fault", mode, promoted.Round(time.Millisecond))
	for _, v := range []string{"Session", "Lead", "RunOnce (claim)"} {
		h := first[v]
		took := h.end.Sub(start)
		t.Logf("figure: %s: %s learnt the loss after %v (keepalive %v), cause %v; returned %v", mode, v, took.Round(time.Millisecond), keepalive, h.cause, results[v].err)
		if !errors.Is(h.cause, ormlock.ErrLockLost) {
			t.Errorf("%s: ctx cause %v, want ErrLockLost", v, h.cause)
		}
		if limit := 2*keepalive + 500*time.Millisecond; took > limit {
			t.Errorf("%s learnt the loss after %v, want within two keepalives (%v)", v, took, limit)
		}
	}
	for _, v := range []string{"Transaction", "RunOnce"} {
		h := results[v]
		t.Logf("figure: %s: %s returned after %v: %v", mode, v, h.end.Sub(start).Round(time.Millisecond), h.err)
		if h.err == nil {
			t.Errorf("%s returned nil: a commit to the lost primary taken for a success", v)
		} else if !errors.Is(h.err, ormlock.ErrLockLost) && !errors.Is(h.err, ormlock.ErrCommitUnknown) {
			t.Errorf("%s: %v, want ErrLockLost or ErrCommitUnknown", v, h.err)
		}
	}

	// The ledger: slot 0 was done before, slot 1's run never committed.
	if runSlot(t, db, "sync-job", slot0) {
		t.Error("slot 0, done before the failover, ran again on the new primary")
	}
	// Tokens: every counter continues above what any fn saw.
	after := map[string]int64{
		"Session":     token(t, db, "sync-session"),
		"Transaction": token(t, db, "sync-tx"),
	}
	if leadNext.token == 0 {
		after["Lead"] = token(t, db, "sync-lead")
	} else {
		after["Lead"] = leadNext.token
	}
	for v, tok := range after {
		before := results[v].token
		t.Logf("figure: %s: %s token %d before the promotion, %d after", mode, v, before, tok)
		if tok <= before {
			t.Errorf("%s: token %d after the promotion, not greater than %d seen before it", v, tok, before)
		}
	}
	// A stale holder's fenced write is refused on the new primary.
	newer := after["Session"]
	if err := ormlock.CheckFenced(db.Exec("UPDATE accounts SET balance = 10, fence = $1 WHERE id = 1 AND fence <= $1", newer)); err != nil {
		t.Fatalf("fenced write of the new holder: %v", err)
	}
	stale := results["Session"].token
	err := ormlock.CheckFenced(db.Exec("UPDATE accounts SET balance = 20, fence = $1 WHERE id = 1 AND fence <= $1", stale))
	if !errors.Is(err, ormlock.ErrStaleToken) {
		t.Errorf("stale holder's fenced write (token %d after %d): %v, want ErrStaleToken", stale, newer, err)
	}
}

func waitGroup(t *testing.T, wg *sync.WaitGroup, limit time.Duration, what string) {
	t.Helper()
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(limit):
		t.Fatalf("waited %v for %s", limit, what)
	}
}

func waitFor(t *testing.T, limit time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPGSyncCommitWaitCancelled freezes the link to the synchronous
// standby while a Transaction commits: the primary has committed locally
// and waits for the standby's flush, which never comes. The COMMIT's
// deadline (the verb's ctx) cancels that wait; PostgreSQL then warns that
// the transaction "has already committed locally, but might not have been
// replicated", and the verb must say ErrCommitUnknown, never success: a
// promotion now would lose a commit the caller was told of.
func TestPGSyncCommitWaitCancelled(t *testing.T) {
	topology(t)
	r := testdb.StartPGReplication(t, true)
	db := openFront(t, r)
	if _, err := db.Exec("CREATE TABLE marks (id int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	r.Link.Freeze()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	err := sqllock.Transaction(ctx, db, "sync-commit", func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO marks VALUES (1)")
		return err
	})
	t.Logf("figure: COMMIT waiting for a frozen synchronous standby, ctx deadline 2s: returned after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if !errors.Is(err, ormlock.ErrCommitUnknown) {
		t.Errorf("Transaction: %v, want ErrCommitUnknown", err)
	}
	count := func() int {
		var n int
		if err := r.Primary.DB(t).QueryRow("SELECT count(*) FROM marks").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waiting := count()
	// Once the standby receives the WAL again, the wait ends and the row
	// shows: the commit the caller was not told of happened.
	r.Link.Thaw()
	r.WaitReplayed(t)
	deadline := time.Now().Add(10 * time.Second)
	for count() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	after := count()
	t.Logf("figure: the row is visible on the primary: %d while the standby was frozen, %d once it caught up", waiting, after)
	if after != 1 {
		t.Errorf("the row committed locally is not there once the standby caught up (%d rows): the test did not reach the wait it means to cancel", after)
	}
}
