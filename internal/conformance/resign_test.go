package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

// Leaders asked to step down (ormlock.Resign through each adapter's Act),
// with server locks and with leases: two Leads on one key; the leader's
// fn's context ends with a cause wrapping ErrLockLost that says who asked
// and why, within one check interval (the keepalive, or the lease's
// renewal interval) and a margin; the other leads; the resigned replica
// stays out for the cooldown, so when the new leader steps down by
// itself nobody leads until the cooldown ends, and then the resigned one
// leads again. A resign of a key nobody holds, or without an author, is
// refused and changes nothing.
func TestLeadResign(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		const keepalive = 200 * time.Millisecond
		rs := [2]runner{openRunner(t, a, k), openRunner(t, a, k)}
		tbl := controlsLedger(t, k, ledgerTable(t, k, rs[0]))
		opts := []ormlock.Option{ormlock.WithKeepalive(keepalive), ormlock.WithLedgerTable(tbl)}
		leadResign(t, a, k, rs, keepalive, opts, opts...)
	})
}

// TestLeaseLeadResign is TestLeadResign for leaders WithLease, asked to
// step down by an operator whose Act does not say WithLease (the lease
// table is where it looks when no server lock holds the key).
func TestLeaseLeadResign(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		const ttl = time.Second // renewed every third of it
		rs := [2]runner{openRunner(t, a, k), openRunner(t, a, k)}
		opts := leaseOpts(t, k, rs[0], ttl)
		controlsLedger(t, k, testdb.TableName(t, "c")) // leaseOpts's ledger
		// in a namespace: the leaders' and the action's; the action
		// does not say the leader campaigns WithLease
		ns := ormlock.WithNamespace("resign-ns")
		act := []ormlock.Option{ormlock.WithLedgerTable(testdb.TableName(t, "c")), ormlock.WithLeaseTable(leaseTableOf(t, k)), ns}
		leadResign(t, a, k, rs, ttl/3, act, append(opts, ns)...)
	})
}

// leadResign runs the test of TestLeadResign on rs, whose Leads check
// their lock every interval, with opts (the ledger table among them);
// the operator's Act and Actions get act.
func leadResign(t *testing.T, a adapter, k testdb.Kind, rs [2]runner, every time.Duration, act []ormlock.Option, opts ...ormlock.Option) {
	const cooldown = time.Second
	const margin = 2 * time.Second
	opts = slices.Clip(opts) // each replica appends its owner
	key := "resign-" + t.Name()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// refused: a key nobody holds, an action without an author
	if _, err := resignAct(ctx, rs[0], ormlock.Resign(key).By("op", "move"), act...); !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "nobody holds") {
		t.Fatalf("Act(Resign) of a free key = %v, want ErrInvalidArgument saying nobody holds it", err)
	}
	if _, err := resignAct(ctx, rs[0], ormlock.Resign(key), act...); !errors.Is(err, ormlock.ErrInvalidArgument) {
		t.Fatalf("Act(Resign) without an author = %v, want ErrInvalidArgument", err)
	}

	type elected struct {
		replica int
		at      time.Time
	}
	terms := make(chan elected, 8)
	causes := make(chan error, 8)
	results := make(chan error, 2)
	var quit [2]chan struct{}
	for i := range rs {
		quit[i] = make(chan struct{})
		l := leaderOf(t, a, rs[i])
		go func() {
			results <- l.Lead(ctx, key, func(fctx context.Context) error {
				terms <- elected{i, time.Now()}
				select {
				case <-fctx.Done():
					causes <- context.Cause(fctx)
					return fctx.Err()
				case <-quit[i]:
					return nil
				}
			}, append(opts, ormlock.WithOwner(fmt.Sprintf("replica-%d", i)))...)
		}()
	}
	running := len(rs)
	defer func() {
		cancel()
		for range running {
			if err := recv(t, results, 15*time.Second, "return of Lead"); err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("Lead = %v, want nil or context.Canceled", err)
			}
		}
	}()

	first := recv(t, terms, 15*time.Second, "leader")
	a1 := ormlock.Resign(key).By("op", "move")
	a1.Cooldown = cooldown
	rec, err := resignAct(ctx, rs[1-first.replica], a1, act...)
	asked := time.Now()
	if err != nil {
		t.Fatalf("Act(Resign): %v", err)
	}
	if rec.ID == 0 || rec.Kind != ormlock.ActionResign || rec.Key != key || rec.Author != "op" || rec.Reason != "move" || rec.At.IsZero() ||
		!strings.Contains(rec.Outcome, fmt.Sprintf("replica-%d", first.replica)) {
		t.Errorf("Act(Resign) = %+v; the leader is replica-%d", rec, first.replica)
	}
	log, err := rs[0].(actor).Actions(ctx, "", 10, act...)
	if err != nil || len(log) == 0 || log[0].ID != rec.ID || log[0].Key != key || log[0].Kind != ormlock.ActionResign {
		t.Errorf("Actions after the resign = %+v, %v; want its entry first", log, err)
	}
	cause := recv(t, causes, every+margin, "resign of the leader within one check interval")
	t.Logf("the leader's fn saw the resign %v after the action committed (check interval %v)", time.Since(asked), every)
	if !errors.Is(cause, ormlock.ErrLockLost) || !strings.Contains(cause.Error(), "asked to resign by op: move") {
		t.Fatalf("resigned leader's cause = %v, want ErrLockLost saying it was asked to resign by op: move", cause)
	}
	second := recv(t, terms, every+margin, "new leader")
	if second.replica == first.replica {
		t.Fatalf("replica %d led again %v after it was asked to resign (cooldown %v)", first.replica, second.at.Sub(asked), cooldown)
	}
	// the new leader steps down by itself: the resigned one is still
	// out, so nobody leads until its cooldown ends
	close(quit[second.replica])
	running--
	if err := recv(t, results, 15*time.Second, "return of the leader that stepped down"); err != nil {
		t.Fatalf("Lead that stepped down = %v, want nil", err)
	}
	third := recv(t, terms, cooldown+every+margin, "leader after the cooldown")
	if third.replica != first.replica || third.at.Sub(asked) < cooldown-every {
		t.Fatalf("replica %d elected %v after the resign, want replica %d after its cooldown %v", third.replica, third.at.Sub(asked), first.replica, cooldown)
	}
	close(quit[third.replica])
}

// Lead WithoutCampaign follows: it never campaigns nor calls fn, returns
// its context's cause when the context ends, and Holder names the leader
// meanwhile; every other verb refuses the option.
func TestLeadWithoutCampaign(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		tbl := controlsLedger(t, k, ledgerTable(t, k, r))
		key := "follow-" + t.Name()
		opts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithKeepalive(200 * time.Millisecond)}
		l := leaderOf(t, a, r)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		leading := make(chan struct{})
		led := make(chan error, 1)
		go func() {
			led <- l.Lead(ctx, key, func(fctx context.Context) error {
				close(leading)
				<-fctx.Done()
				return fctx.Err()
			}, append(opts, ormlock.WithOwner("leader"))...)
		}()
		recv(t, leading, 15*time.Second, "leader")

		follower := leaderOf(t, a, openRunner(t, a, k))
		fctx, fcancel := context.WithCancelCause(context.Background())
		followed := make(chan error, 1)
		called := make(chan struct{}, 1)
		go func() {
			followed <- follower.Lead(fctx, key, func(context.Context) error {
				called <- struct{}{}
				return nil
			}, append(opts, ormlock.WithoutCampaign(), ormlock.WithOwner("follower"))...)
		}()
		h, err := r.Holder(ctx, key, opts...)
		if err != nil || !h.Held || h.Owner != "leader" {
			t.Fatalf("Holder beside a follower = %+v, %v; want held by leader", h, err)
		}
		stop := errors.New("drained")
		fcancel(stop)
		if err := recv(t, followed, 5*time.Second, "return of the follower"); !errors.Is(err, stop) {
			t.Fatalf("Lead WithoutCampaign = %v, want its context's cause", err)
		}
		select {
		case <-called:
			t.Fatal("Lead WithoutCampaign called fn")
		default:
		}
		// every other verb refuses the option, before any lock
		err = r.Session(ctx, key+"-session", func(context.Context) error { return nil }, ormlock.WithoutCampaign())
		if !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "WithoutCampaign") {
			t.Errorf("Session WithoutCampaign = %v, want ErrInvalidArgument naming it", err)
		}
		if _, err := r.Holder(ctx, key, append(opts, ormlock.WithoutCampaign())...); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Errorf("Holder WithoutCampaign = %v, want ErrInvalidArgument", err)
		}
		cancel()
		if err := recv(t, led, 15*time.Second, "return of the leader"); !errors.Is(err, context.Canceled) {
			t.Errorf("Lead after cancel = %v", err)
		}
	})
}

// resignAct is r's adapter's Act.
func resignAct(ctx context.Context, r runner, a ormlock.Action, opts ...ormlock.Option) (ormlock.ActionRecord, error) {
	return r.(actor).Act(ctx, a, opts...)
}

// controlsLedger returns tbl, the test's ledger table, whose Migrate
// created its controls table and actions log (dropped with it), and drops
// the owners table of MySQL/MariaDB Leads after the test.
func controlsLedger(t *testing.T, k testdb.Kind, tbl string) string {
	t.Helper()
	t.Cleanup(func() {
		if _, err := testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + tbl + lockproto.OwnersTableSuffix); err != nil {
			t.Errorf("drop the owners table: %v", err)
		}
	})
	return tbl
}
