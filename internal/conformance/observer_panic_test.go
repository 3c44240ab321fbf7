package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
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
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			testdb.ObserverPanicSuite(t, func(t *testing.T, k testdb.Kind) (*sql.DB, testdb.Provoke) {
				r := openRunner(t, a, k)
				tbl := ledgerTable(t, k, r)
				return r.Pool(), func(t *testing.T, verb string, ev ormlock.EventKind, obs ormlock.Observer) error {
					return provoke(t, k, r, verb, ev, obs, tbl)
				}
			})
		})
	}
}

// provoke calls verb with obs so that event ev happens, and returns the
// verb's error; a release failure on a dedicated connection is a loss found
// at release, so its ErrLockLost is dropped here.
func provoke(t *testing.T, k testdb.Kind, r runner, verb string, ev ormlock.EventKind, obs ormlock.Observer, tbl string) error {
	t.Helper()
	ctx := context.Background()
	name := "opanic-" + t.Name()
	job, slot := name, testdb.Slot(int(ev))
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
		defer testdb.RawHold(t, k, "", key.String())()
	case ormlock.EventLockLost:
		opts = append(opts, ormlock.WithKeepalive(100*time.Millisecond))
	case ormlock.EventReleaseFailed:
		opts = append(opts, ormlock.WithKeepalive(time.Hour))
	case ormlock.EventAlreadyDone:
		first := append([]ormlock.Option{ormlock.WithLedgerTable(tbl)}, claim...)
		if err := r.RunOnce(ctx, job, slot, func(txn) error { return nil }, first...); err != nil {
			t.Fatalf("first run: %v", err)
		}
	}

	// body is fn's work: nothing, or what makes the lock fail or get lost
	body := func(ctx context.Context, tx txn) error {
		switch {
		case ev == ormlock.EventReleaseFailed && tx != nil && verb != "RunOnce claim":
			// the lock released behind ormlock's back: RELEASE_LOCK fails
			return tx.Exec("DO RELEASE_LOCK(?)", keyhash.MySQLName("", key.String()))
		case ev == ormlock.EventReleaseFailed, ev == ormlock.EventLockLost:
			h, err := r.Holder(ctx, key)
			if err != nil || !h.Held {
				return fmt.Errorf("holder: %v %v", h, err)
			}
			testdb.Kill(t, k, h.PID)
			if ev == ormlock.EventReleaseFailed { // no keepalive check: the release finds it
				testdb.WaitGone(t, k, h.PID)
				return nil
			}
			// a Session's ctx ends with the loss; fn's tx of a claim run is
			// bound to the lock's session (gormlock: its context ends;
			// entlock: its statements fail once the loss is seen)
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if err := ctx.Err(); err != nil {
					return err
				}
				if tx != nil {
					if _, err := tx.QueryInt("SELECT 1"); err != nil {
						return err
					}
				}
			}
			return errors.New("loss not seen within 30s")
		}
		return nil
	}
	var err error
	switch verb {
	case "Transaction":
		err = r.Transaction(ctx, key, func(tx txn) error { return body(tx.Context(), tx) }, opts...)
	case "Session":
		err = r.Session(ctx, key, func(ctx context.Context) error { return body(ctx, nil) }, opts...)
	default:
		err = r.RunOnce(ctx, job, slot, func(tx txn) error { return body(tx.Context(), tx) }, opts...)
	}
	if ev == ormlock.EventReleaseFailed && errors.Is(err, ormlock.ErrLockLost) {
		return nil
	}
	return err
}
