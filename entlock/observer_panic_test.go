package entlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/internal/enttest/ent"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
)

// An observer that panics, on any event, of any verb, on any server, costs
// neither the lock nor its connection nor the process: the verb ends as it
// would have with a quiet observer, the lock is free afterwards, no
// connection is in use, and the panic is reported once on slog.Default. A
// panic on lock_lost, which runs on the Session's keepalive goroutine, would
// otherwise end the test binary.
func TestObserverPanicContained(t *testing.T) {
	testdb.ObserverPanicSuite(t, func(t *testing.T, k testdb.Kind) (*sql.DB, testdb.Provoke) {
		client, sqlDB := openEnt(t, k)
		tbl := ledgerTable(t, k, client)
		return sqlDB, func(t *testing.T, verb string, ev ormlock.EventKind, obs ormlock.Observer) error {
			return provokeEnt(t, k, client, verb, ev, obs, tbl)
		}
	})
}

// provokeEnt calls verb with obs so that event ev happens, and returns the
// verb's error; a release failure on a dedicated connection is a loss found
// at release, so its ErrLockLost is dropped here.
func provokeEnt(t *testing.T, k testdb.Kind, client *ent.Client, verb string, ev ormlock.EventKind, obs ormlock.Observer, tbl string) error {
	t.Helper()
	ctx := context.Background()
	name := "opanic-" + t.Name()
	job, slot := name, slotAt(int(ev))
	key := ormlock.Name(name)
	if strings.HasPrefix(verb, "RunOnce") {
		key = keys.RunKey(job, slot)
	}
	var claim []ormlock.Option
	if verb == "RunOnce claim" {
		claim = []ormlock.Option{ormlock.WithClaim()}
	}
	opts := append([]ormlock.Option{ormlock.WithObserver(obs), ormlock.WithLedgerTable(tbl)}, claim...)
	switch ev {
	case ormlock.EventNotAcquired:
		defer rawHold(t, k, key.String())()
	case ormlock.EventLockLost:
		opts = append(opts, ormlock.WithKeepalive(100*time.Millisecond))
	case ormlock.EventReleaseFailed:
		opts = append(opts, ormlock.WithKeepalive(time.Hour))
	case ormlock.EventAlreadyDone:
		first := append([]ormlock.Option{ormlock.WithLedgerTable(tbl)}, claim...)
		if err := entlock.RunOnce(ctx, client, job, slot, func(*ent.Tx) error { return nil }, first...); err != nil {
			t.Fatalf("first run: %v", err)
		}
	}

	// body is fn's work: nothing, or what makes the lock fail or get lost
	body := func(ctx context.Context, tx *ent.Tx) error {
		switch {
		case ev == ormlock.EventReleaseFailed && tx != nil && verb != "RunOnce claim":
			// the lock released behind ormlock's back: RELEASE_LOCK fails
			_, err := tx.ExecContext(ctx, "DO RELEASE_LOCK(?)", keyhash.MySQLName("", key.String()))
			return err
		case ev == ormlock.EventReleaseFailed, ev == ormlock.EventLockLost:
			h, err := entlock.Holder(ctx, client, key)
			if err != nil || !h.Held {
				return fmt.Errorf("holder: %v %v", h, err)
			}
			testdb.Kill(t, k, h.PID)
			if ev == ormlock.EventReleaseFailed { // no keepalive check: the release finds it
				return waitGone(t, k, h.PID)
			}
			if verb == "RunOnce claim" {
				// fn's tx is bound to the lock's session: it fails once
				// the loss is seen
				for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
					if _, err := tx.Item.Query().Count(ctx); err != nil {
						return err
					}
				}
				return errors.New("fn's transaction survived the lock for 30s")
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(30 * time.Second):
				return errors.New("loss not seen within 30s")
			}
		}
		return nil
	}
	var err error
	switch verb {
	case "Transaction":
		err = entlock.Transaction(ctx, client, key, func(tx *ent.Tx) error { return body(ctx, tx) }, opts...)
	case "Session":
		err = entlock.Session(ctx, client, key, func(ctx context.Context) error { return body(ctx, nil) }, opts...)
	default:
		err = entlock.RunOnce(ctx, client, job, slot, func(tx *ent.Tx) error { return body(ctx, tx) }, opts...)
	}
	if ev == ormlock.EventReleaseFailed && errors.Is(err, ormlock.ErrLockLost) {
		return nil
	}
	return err
}

// waitGone waits (up to 10s) until the server connection id has ended.
func waitGone(t *testing.T, k testdb.Kind, id int64) error {
	t.Helper()
	q := "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?"
	if k.Dialect() == "postgres" {
		q = "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = $1"
	}
	admin := testdb.AdminDB(t, k)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var n int
		if err := admin.QueryRow(q, id).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
	}
	return fmt.Errorf("connection %d still there after 10s", id)
}

// txPanics is a client whose Tx panics after the Driver began the locked
// transaction, as a layer between the verb and the Driver (a hook, a
// wrapper) might.
type txPanics struct{ c *ent.Client }

func (p txPanics) Tx(ctx context.Context) (*ent.Tx, error) {
	if _, err := p.c.Tx(ctx); err != nil {
		return nil, err
	}
	panic("client.Tx: after the driver")
}

// A panic between the lock and fn still releases the lock and the
// connection.
func TestPanicAfterLockReleases(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		client, sqlDB := openEnt(t, k)
		tbl := ledgerTable(t, k, client)
		name := "panic-after-lock-" + t.Name()
		for _, verb := range []string{"Transaction", "RunOnce"} {
			func() {
				defer func() {
					if p := recover(); p == nil {
						t.Errorf("%s: no panic", verb)
					}
				}()
				if verb == "Transaction" {
					_ = entlock.Transaction(context.Background(), txPanics{client}, name, func(*ent.Tx) error { return nil })
				} else {
					_ = entlock.RunOnce(context.Background(), txPanics{client}, name, slotAt(0), func(*ent.Tx) error { return nil }, ormlock.WithLedgerTable(tbl))
				}
			}()
			testdb.AssertNoLeaks(t, k, sqlDB)
		}
	})
}
