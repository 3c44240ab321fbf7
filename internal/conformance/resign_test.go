package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/pgxlock"
	"github.com/ormlock/ormlock/sqllock"
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
		leadResign(t, a, k, rs, keepalive, ormlock.WithKeepalive(keepalive), ormlock.WithLedgerTable(tbl))
	})
}

func TestLeaseLeadResign(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		const ttl = time.Second // renewed every third of it
		rs := [2]runner{openRunner(t, a, k), openRunner(t, a, k)}
		opts := leaseOpts(t, k, rs[0], ttl)
		controlsLedger(t, k, testdb.TableName(t, "c")) // leaseOpts's ledger
		leadResign(t, a, k, rs, ttl/3, opts...)
	})
}

// leadResign runs the test of TestLeadResign on rs, whose Leads check
// their lock every interval, with opts (the ledger table among them).
func leadResign(t *testing.T, a adapter, k testdb.Kind, rs [2]runner, every time.Duration, opts ...ormlock.Option) {
	const cooldown = 2 * time.Second
	const margin = 2 * time.Second
	key := "resign-" + t.Name()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// refused: a key nobody holds, an action without an author
	if _, err := resignAct(ctx, rs[0], ormlock.Resign(key).By("op", "move"), opts...); !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "nobody holds") {
		t.Fatalf("Act(Resign) of a free key = %v, want ErrInvalidArgument saying nobody holds it", err)
	}
	if _, err := resignAct(ctx, rs[0], ormlock.Resign(key), opts...); !errors.Is(err, ormlock.ErrInvalidArgument) {
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
	rec, err := resignAct(ctx, rs[1-first.replica], a1, opts...)
	asked := time.Now()
	if err != nil {
		t.Fatalf("Act(Resign): %v", err)
	}
	if rec.ID == 0 || rec.Kind != ormlock.ActionResign || rec.Key != key || rec.Author != "op" || rec.Reason != "move" || rec.At.IsZero() ||
		!strings.Contains(rec.Outcome, fmt.Sprintf("replica-%d", first.replica)) {
		t.Errorf("Act(Resign) = %+v", rec)
	}
	cause := recv(t, causes, every+margin, "resign of the leader within one check interval")
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
	switch l := r.(type) {
	case gormLocker:
		return gormlock.Act(l.db.WithContext(ctx), a, opts...)
	case entLocker:
		return entlock.Act(ctx, l.client, a, opts...)
	case sqlLocker:
		return sqllock.Act(ctx, l.db, a, l.with(opts)...)
	case pgxLocker:
		return pgxlock.Act(ctx, l.pools.pool(), a, l.with(opts)...)
	}
	panic(fmt.Sprintf("no Act for %T", r))
}

// controlsLedger makes sure the controls tables of the test's ledger
// table tbl exist, and drops them, and the owners table of MySQL/MariaDB
// Leads, after the test; it returns tbl.
func controlsLedger(t *testing.T, k testdb.Kind, tbl string) string {
	t.Helper()
	admin := testdb.AdminDB(t, k)
	t.Cleanup(func() {
		for _, s := range []string{"_controls", "_actions", lockproto.OwnersTableSuffix} {
			if _, err := admin.Exec("DROP TABLE IF EXISTS " + tbl + s); err != nil {
				t.Errorf("drop %s%s: %v", tbl, s, err)
			}
		}
	})
	for _, ddl := range controlsDDL(k, tbl) {
		if _, err := admin.Exec(ddl); err != nil {
			t.Fatalf("create the controls tables: %v", err)
		}
	}
	return tbl
}

// controlsDDL is the controls table and actions log of ledger tbl, for
// the servers whose Migrate does not create them yet.
func controlsDDL(k testdb.Kind, tbl string) []string {
	if k.Dialect() == "mysql" {
		return []string{
			"CREATE TABLE IF NOT EXISTS " + tbl + `_controls (
	namespace VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
	kind VARCHAR(16) NOT NULL, name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
	paused TINYINT(1) NOT NULL DEFAULT 0, schedule TEXT NULL, resign_at DATETIME(6) NULL,
	resign_owner VARCHAR(255) NOT NULL DEFAULT '', cooldown_ms BIGINT NOT NULL DEFAULT 0,
	author VARCHAR(255) NOT NULL DEFAULT '', reason TEXT NULL, changed_at DATETIME(6) NOT NULL,
	PRIMARY KEY (namespace, kind, name)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
			"CREATE TABLE IF NOT EXISTS " + tbl + `_actions (
	id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
	namespace VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
	kind VARCHAR(16) NOT NULL, name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
	slot DATETIME(6) NULL, author VARCHAR(255) NOT NULL, reason TEXT NULL, outcome TEXT NULL,
	at DATETIME(6) NOT NULL, KEY (namespace, name, id)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
		}
	}
	return []string{
		"CREATE TABLE IF NOT EXISTS " + tbl + `_controls (
	namespace varchar(128) NOT NULL DEFAULT '', kind varchar(16) NOT NULL, name varchar(255) NOT NULL,
	paused boolean NOT NULL DEFAULT false, schedule text, resign_at timestamptz,
	resign_owner varchar(255) NOT NULL DEFAULT '', cooldown_ms bigint NOT NULL DEFAULT 0,
	author varchar(255) NOT NULL DEFAULT '', reason text, changed_at timestamptz NOT NULL,
	PRIMARY KEY (namespace, kind, name))`,
		"CREATE TABLE IF NOT EXISTS " + tbl + `_actions (
	id bigserial PRIMARY KEY, namespace varchar(128) NOT NULL DEFAULT '', kind varchar(16) NOT NULL,
	name varchar(255) NOT NULL, slot timestamptz, author varchar(255) NOT NULL, reason text,
	outcome text, at timestamptz NOT NULL)`,
	}
}
